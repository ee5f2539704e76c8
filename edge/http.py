"""What every lane of the edge decides the same way about a request before any view runs, in
one function each: the Host header (ALLOWED_HOSTS), whether it came over HTTPS and where the
SSL redirect sends it, the security and frame headers of an answer, and the release of the
thread's database connection after a call.

Django's own middleware (SecurityMiddleware, XFrameOptionsMiddleware, CommonMiddleware's host
check) applies these rules to the Django lane; the fast lane and /mcp, which answer without
Django's request cycle, call these functions, which read the same settings
(tests/edge/test_fastlane.py and tests/edge/test_edge_hardening.py compare the answers)."""

import re
import threading
import time
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host

from edge.dispatch import Scope

# What the settings decide per request (security headers, allowed hosts), computed once per
# distinct input and forgotten when a setting changes (tests override settings).
_memo: dict[tuple[str, Any], Any] = {}


@receiver(setting_changed)
def _forget(**kwargs: Any) -> None:
    _memo.clear()


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """An ASGI scope's headers by (lower-case) name, repeated ones joined with commas as the
    WSGI environ joins them."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers[name] = headers[name] + b"," + value if name in headers else value
    return headers


def host_allowed(headers: dict[bytes, bytes]) -> bool:
    """Whether the Host header names a host in ALLOWED_HOSTS (Django's validate_host; under
    DEBUG with none set, the local names Django allows)."""
    host = headers.get(b"host", b"")
    found = _memo.get(("host", host))
    if found is None:
        found = _host_allowed_now(host.decode("latin1"))
        if len(_memo) < 1000:  # Host is the client's to choose: remember only a few
            _memo[("host", host)] = found
    return found


def _host_allowed_now(host: str) -> bool:
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def request_is_secure(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    """Django's request.is_secure() for an ASGI scope: SECURE_PROXY_SSL_HEADER when set and
    the request carries that header (only behind a proxy that sets it), else the connection's
    own scheme (as HttpRequest.scheme falls back when the header is absent)."""
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, value = proxy_header
        given = headers.get(name.removeprefix("HTTP_").lower().replace("_", "-").encode())
        if given is not None:
            return given.decode("latin1").split(",")[0].strip() == value
    return scope.get("scheme") == "https"


def https_redirect(scope: Scope, headers: dict[bytes, bytes]) -> str | None:
    """Where SecurityMiddleware would send this plain-HTTP request (SECURE_SSL_REDIRECT: a 301
    to the same host and path over https), or None when it would let it through."""
    if not settings.SECURE_SSL_REDIRECT or request_is_secure(scope, headers):
        return None
    path = scope.get("path", "")
    if any(re.search(pattern, path.lstrip("/")) for pattern in settings.SECURE_REDIRECT_EXEMPT):
        return None
    host = settings.SECURE_SSL_HOST or headers.get(b"host", b"").decode("latin1")
    raw = (scope.get("raw_path") or path.encode()).decode("latin1")  # as sent: percent-escapes kept
    query = scope.get("query_string", b"").decode("latin1")
    return f"https://{host}{raw}" + (f"?{query}" if query else "")


def edge_headers(secure: bool, request_id: str) -> list[tuple[bytes, bytes]]:
    """What every lane adds to an answer around its own headers: the security and frame
    headers and the request id (Django's middleware adds the same)."""
    return [*security_headers(secure), (b"x-request-id", request_id.encode())]


def security_headers(secure: bool) -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to an API answer."""
    found = _memo.get(("security", secure))
    if found is None:
        found = _memo[("security", secure)] = _security_headers_now(secure)
    return found


def _security_headers_now(secure: bool) -> list[tuple[bytes, bytes]]:
    out = [(b"x-frame-options", settings.X_FRAME_OPTIONS.encode())]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        out.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_HSTS_SECONDS and secure:
        value = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            value += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            value += "; preload"
        out.append((b"strict-transport-security", value.encode()))
    if settings.SECURE_REFERRER_POLICY:
        out.append((b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        out.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()))
    return out


_checked = threading.local()
HEALTH_CHECK_EVERY = 1.0  # seconds


def release_connection() -> None:
    """What request_finished does under Django (close a connection that failed or is too old,
    and check its health before the next statement, a SELECT 1 round trip), but the health
    check at most once a second per thread: on the per-turn path that round trip cost as much
    as the statement it guarded. A connection that failed in between is closed at once."""
    now = time.monotonic()
    if connection.errors_occurred or now - getattr(_checked, "at", 0.0) >= HEALTH_CHECK_EVERY:
        _checked.at = now
        connection.close_if_unusable_or_obsolete()
