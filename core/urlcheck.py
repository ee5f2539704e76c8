"""Which URLs the registry may reach out to: webhook endpoints and the MCP servers bundles
declare (registry.mcp_pins). By default only public addresses: a registry that connects
wherever an admin or a publisher says is a way into the private network behind it (SSRF).
Both follow WEBHOOK_ALLOW_PRIVATE_URLS."""

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from django.conf import settings


class UrlNotAllowed(ValueError):
    pass


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# getaddrinfo cannot be interrupted: it runs here so that an attempt can stop waiting for it.
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


@dataclass(frozen=True)
class Resolved:
    """A URL's host and port and the addresses it resolved to, every one of them checked: the
    delivery connects to addresses[0] (core.transport), never resolving again."""

    host: str
    port: int
    addresses: tuple[Address, ...]


def _addresses(host: str, port: int, timeout: float | None = None) -> list[Address]:
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        return [literal]
    except ValueError:
        pass
    try:
        infos = _resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(timeout)
    except (socket.gaierror, UnicodeError):
        raise UrlNotAllowed(f"The host {host!r} does not resolve.") from None
    except FutureTimeout:
        raise UrlNotAllowed(f"The host {host!r} did not resolve in time.") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise UrlNotAllowed(f"The host {host!r} does not resolve.")
    return addresses


def _parts(url: str) -> tuple[SplitResult, str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UrlNotAllowed("Not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlNotAllowed("Use an http:// or https:// URL with a host.")
    if parts.username or parts.password:
        raise UrlNotAllowed("Credentials in the URL would be stored and shown; the signature authenticates us.")
    return parts, parts.hostname, port


# IPv6 prefixes that carry an IPv4 address in their last 32 bits and reach it: NAT64's
# well-known prefix (RFC 6052), IPv4-compatible (::a.b.c.d, deprecated but still routed by some
# stacks) and IPv4-translated (RFC 2765). Python calls these global whatever IPv4 they carry, so
# 64:ff9b::a00:1 would reach 10.0.0.1 through a NAT64 gateway: each is judged by its IPv4.
_EMBEDS_IPV4 = tuple(ipaddress.IPv6Network(prefix) for prefix in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96"))
# Local-use NAT64 (RFC 8215): whatever it maps to is the operator's own network.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, compatible, translated,
    6to4), or None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _EMBEDS_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _refused(address: Address) -> bool:
    if address.is_multicast:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address in _LOCAL_NAT64:
        return True
    # An address that stands for an IPv4 one is judged by that IPv4 alone: Python's own verdict
    # on the prefix differs by patch release (3.11.2 calls all of 6to4's 2002::/16 private, so
    # 2002:808:808::1, which is 8.8.8.8, was refused there and accepted on 3.11.7).
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return not embedded.is_global or embedded.is_multicast
    return not address.is_global


def _check(host: str, addresses: list[Address]) -> None:
    if settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        return
    for address in addresses:
        if _refused(address):
            raise UrlNotAllowed(
                f"{host} is a loopback, link-local, private or reserved address ({address}); "
                "set WEBHOOK_ALLOW_PRIVATE_URLS=1 to allow such endpoints."
            )


def check_url(url: str) -> str:
    """Return `url` if a delivery may go there, else raise UrlNotAllowed saying why.
    Checked when an endpoint is saved; every attempt checks again with `resolve`."""
    _, host, port = _parts(url)
    if not settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        _check(host, _addresses(host, port))
    return url


def resolve(url: str, *, timeout: float | None = None) -> Resolved:
    """Resolve `url`'s host once (waiting at most `timeout` seconds) and check every address
    (DNS can change after the endpoint was saved); the attempt then connects to what this
    returns, so there is no second lookup an attacker's DNS could answer differently."""
    _, host, port = _parts(url)
    addresses = _addresses(host, port, timeout)
    _check(host, addresses)
    return Resolved(host=host.strip("[]"), port=port, addresses=tuple(addresses))
