"""One place that turns every error into the contract's shape:
{"error": {"code": ..., "message": ..., "details": {...}}}."""

import re
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf

from core import limits
from core.errors import DomainError

_DRF_CODES: list[tuple[type[drf.APIException], int, str]] = [
    (drf.ParseError, 400, "malformed_json"),
    (drf.ValidationError, 400, "validation_error"),
    (drf.NotAuthenticated, 401, "not_authenticated"),
    (drf.AuthenticationFailed, 401, "not_authenticated"),
    (drf.PermissionDenied, 403, "permission_denied"),
    (drf.NotFound, 404, "not_found"),
    (drf.MethodNotAllowed, 405, "method_not_allowed"),
    (drf.NotAcceptable, 406, "not_acceptable"),
    (drf.UnsupportedMediaType, 415, "unsupported_media_type"),
    (drf.Throttled, 429, "throttled"),
]


# Error messages and details repeat client input (an unknown key, a bad tool name). Such text may
# hold what UTF-8 cannot encode (a lone surrogate from a "\ud800" escape) or be huge (a 100 KB
# key): rendering it as is would be a 500, or an answer the size of the request.
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_ECHO_CHARS = 200


def safe_text(text: str, *, limit: int | None = None) -> str:
    """`text` made safe to put in an error: lone surrogates shown as their escape (so the client
    still sees which key was refused), and cut to `limit` characters with a marker."""
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text


def _safe(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value, limit=10 * MAX_ECHO_CHARS)
    if isinstance(value, dict):
        return {safe_text(str(k), limit=MAX_ECHO_CHARS): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> JsonResponse:
    """The one renderer of the contract's error shape; every string in it is made safe first."""
    return JsonResponse(
        {"error": {"code": code, "message": _safe(str(message)), "details": _safe(details or {})}},
        status=status,
        json_dumps_params={"ensure_ascii": False},
    )


def _as_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {k: v if isinstance(v, list) else [v] for k, v in detail.items()}
    if isinstance(detail, list):
        return {"non_field_errors": detail}
    return {}


# Seconds a client is asked to wait when the database is away. PostgreSQL restarts take a few
# seconds and the first request after it returns succeeds (persistent connections are
# health-checked), so a short wait is right; clients back off further themselves.
UNAVAILABLE_RETRY_AFTER = 5


def is_unavailable(exc: BaseException | None) -> bool:
    """True for the database being unreachable or going away mid-request (a stop, a restart, a
    network cut; also a statement cancelled by the server's statement_timeout): a fault of
    ours that retrying later fixes, not a bug and not the client's doing."""
    return isinstance(exc, (OperationalError, InterfaceError))


def unavailable_response() -> JsonResponse:
    """503 `unavailable` with Retry-After: the one answer to an outage, for DRF views (below),
    every other view (config.urls.server_error) and any other entry point."""
    response = error_response(
        503, "unavailable", "The service is temporarily unavailable (its database is not answering); try again shortly."
    )
    response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER)
    return response


def exception_handler(exc: Exception, context: dict) -> JsonResponse | None:
    if is_unavailable(exc):
        return unavailable_response()
    if isinstance(exc, DomainError):
        return error_response(exc.status, exc.code, exc.message, exc.details)
    if isinstance(exc, Http404):
        return error_response(404, "not_found", "Nothing exists at this address.")
    if isinstance(exc, RequestDataTooBig):
        return error_response(413, "payload_too_large", limits.TOO_LARGE_MESSAGE, limits.TOO_LARGE_DETAILS)
    if isinstance(exc, PermissionDenied):
        return error_response(403, "permission_denied", "Your key's role does not allow this.")
    for cls, status, code in _DRF_CODES:
        if isinstance(exc, cls):
            if isinstance(exc, drf.ValidationError):
                message = "The request is not valid; see details for each field."
                details = _as_details(exc.detail)
            elif isinstance(exc, drf.ParseError):
                message = "The request body is not valid JSON."
                details = {"body": [str(exc.detail)]}
            else:
                message, details = str(exc.detail), {}
            response = error_response(status, code, message, details)
            wait = getattr(exc, "wait", None)  # set by Throttled (absent from its stubs)
            if isinstance(exc, drf.Throttled) and wait is not None:
                response["Retry-After"] = str(int(wait) + 1)
            if status == 401:
                response["WWW-Authenticate"] = 'Bearer realm="api"'
            return response
    if isinstance(exc, drf.APIException):
        # Any other DRF refusal (a bare APIException, a third-party subclass): still the
        # contract's shape, with DRF's status and code, rather than a 500.
        return error_response(exc.status_code, str(exc.default_code), str(exc.detail), _as_details(exc.detail))
    return None  # anything else is our bug: a 500, rendered as JSON by config.urls.handler500
