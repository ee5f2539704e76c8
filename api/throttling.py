from typing import TYPE_CHECKING

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from access.ratelimit import api_throttle_wait
from api.authentication import request_actor

if TYPE_CHECKING:  # DRF loads this module while rest_framework.views is still importing
    from rest_framework.views import APIView


class KeyRateThrottle(BaseThrottle):
    """Per API key, separate budgets for reads and writes (API_THROTTLE_RATES). Over budget:
    429 `throttled` with Retry-After. The rule itself is access.ratelimit.api_throttle_wait,
    which the fast lane (api.fastlane) calls too."""

    _wait: float | None = None

    def allow_request(self, request: Request, view: "APIView") -> bool:
        actor = request_actor(request)
        if actor is None:  # unauthenticated requests are refused before they count
            return True
        self._wait = api_throttle_wait(actor=actor, method=request.method or "")
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
