import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

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
        request_answered(
            route=route, method=request.method or "", status=response.status_code, seconds=time.perf_counter() - started
        )
        return response
