import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from audit.context import current as request_context
from core import observe
from metrics.access import request_logged
from metrics.instruments import request_answered


class RequestMetricsMiddleware:
    """Counts and times every request by its URL route (`api/v1/sessions/<uuid:session_id>/bundle/`),
    not its path, so the label set stays small."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None else "unmatched"
        seconds = time.perf_counter() - started
        request_answered(route=route, method=request.method or "", status=response.status_code, seconds=seconds)
        # The request's notes and id are still set here: audit.context resets them when the
        # response is closed, after this returns.
        notes = observe.current.get()
        request_logged(
            route,
            request.method or "",
            response.status_code,
            seconds,
            request_context.get().request_id or response.get("X-Request-ID", ""),
            notes.key_prefix if notes is not None else "",
            notes.session_id if notes is not None else "",
        )
        return response
