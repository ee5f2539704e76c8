"""Which URLs a webhook may point at. By default only public addresses: a registry that
POSTs wherever an admin says is a way into the private network behind it (SSRF)."""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class UrlNotAllowed(ValueError):
    pass


def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        return [literal]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UrlNotAllowed(f"The host {host!r} does not resolve.") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def check_url(url: str) -> str:
    """Return `url` if a delivery may go there, else raise UrlNotAllowed saying why.
    Checked when an endpoint is saved and again before every attempt (DNS can change)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UrlNotAllowed("Not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlNotAllowed("Use an http:// or https:// URL with a host.")
    if parts.username or parts.password:
        raise UrlNotAllowed("Credentials in the URL would be stored and shown; the signature authenticates us.")
    if settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        return url
    for address in _addresses(parts.hostname, port):
        if not address.is_global or address.is_multicast:
            raise UrlNotAllowed(
                f"{parts.hostname} is a loopback, link-local, private or reserved address ({address}); "
                "set WEBHOOK_ALLOW_PRIVATE_URLS=1 to allow such endpoints."
            )
    return url
