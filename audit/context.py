"""The request an action comes from (id and client address), for the audit log.

Set by RequestContextMiddleware; services read it when they write an audit row, so they need
no request argument and work the same from commands and tasks (where it is empty)."""

import ipaddress
import re
import uuid
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from core import observe


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    client_ip: str | None = None


current: ContextVar[RequestContext] = ContextVar("audit_request_context", default=RequestContext())  # noqa: B039 (frozen)
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def request_id_of(given: str) -> str:
    """The request id of a request whose X-Request-ID is `given`: a well-formed one is kept,
    anything else replaced by a fresh one (every lane: this middleware, the fast lane)."""
    return given if _REQUEST_ID_RE.fullmatch(given) else uuid.uuid4().hex


def client_ip(request: Any) -> str | None:
    """The client's address: REMOTE_ADDR, or, when REMOTE_ADDR is one of TRUSTED_PROXIES, behind
    TRUSTED_PROXY_HOPS proxies the entry of X-Forwarded-For that the outermost trusted proxy
    appended (entries further left are whatever the client sent, so they are never trusted;
    and a peer that is not a configured proxy is never trusted for any of it)."""
    hops = settings.TRUSTED_PROXY_HOPS
    if hops and _from_proxy(request.META.get("REMOTE_ADDR") or ""):
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= hops and _is_ip(forwarded[-hops]):
            return str(forwarded[-hops])
    address: str | None = request.META.get("REMOTE_ADDR") or None
    return address


class _ScopeMeta:
    """Enough of a request for client_ip, from an ASGI scope: only the exact `x-forwarded-for`
    header counts (`x_forwarded_for` is another header, never read)."""

    def __init__(self, scope: Mapping[str, Any]) -> None:
        client = scope.get("client")
        self.META = {"REMOTE_ADDR": client[0] if client else ""}
        forwarded = [value for name, value in scope.get("headers") or [] if name == b"x-forwarded-for"]
        if forwarded:
            self.META["HTTP_X_FORWARDED_FOR"] = b",".join(forwarded).decode("latin1")


def scope_client_ip(scope: Mapping[str, Any]) -> str | None:
    """client_ip of an ASGI request (MCP, which has no Django request)."""
    return client_ip(_ScopeMeta(scope))


def _from_proxy(peer: str) -> bool:
    try:
        address = ipaddress.ip_address(peer.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return any(address in network for network in settings.TRUSTED_PROXIES)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class RequestContextMiddleware:
    """Takes a well-formed X-Request-ID from the client or makes one, and echoes it back."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        given = request.headers.get("X-Request-ID", "")
        request_id = request_id_of(given)
        token = current.set(RequestContext(request_id=request_id, client_ip=client_ip(request)))
        notes = observe.begin()  # what the request is about, for its log lines and span

        def reset() -> None:
            observe.end(notes)
            current.reset(token)

        try:
            response = self.get_response(request)
        except BaseException:
            reset()
            raise
        # Kept until the response is closed: Django logs a 4xx or 5xx answer (django.request)
        # after the last middleware returned, and that line should carry the request id too.
        response._resource_closers.append(reset)  # type: ignore[attr-defined]  # a private list, not in the stubs
        response["X-Request-ID"] = request_id
        return response
