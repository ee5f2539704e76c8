"""The request an action comes from (id and client address), for the audit log.

Set by RequestContextMiddleware; services read it when they write an audit row, so they need
no request argument and work the same from commands and tasks (where it is empty)."""

import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    client_ip: str | None = None


current: ContextVar[RequestContext] = ContextVar("audit_request_context", default=RequestContext())  # noqa: B039 (frozen)
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestContextMiddleware:
    """Takes a well-formed X-Request-ID from the client or makes one, and echoes it back."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        given = request.headers.get("X-Request-ID", "")
        request_id = given if _REQUEST_ID_RE.match(given) else uuid.uuid4().hex
        token = current.set(RequestContext(request_id=request_id, client_ip=request.META.get("REMOTE_ADDR") or None))
        try:
            response = self.get_response(request)
        finally:
            current.reset(token)
        response["X-Request-ID"] = request_id
        return response
