from rest_framework.throttling import BaseThrottle

from access.ratelimit import api_throttle_wait


class KeyRateThrottle(BaseThrottle):
    """Per API key, separate budgets for reads and writes (API_THROTTLE_RATES). Over budget:
    429 `throttled` with Retry-After. The rule itself is access.ratelimit.api_throttle_wait,
    which the fast lane (api.fastlane) calls too."""

    def allow_request(self, request, view) -> bool:
        actor = request.auth
        if actor is None:  # unauthenticated requests are refused before they count
            return True
        self._wait = api_throttle_wait(actor=actor, method=request.method)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
