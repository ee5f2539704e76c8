from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle

from access.ratelimit import seconds_until_allowed


class KeyRateThrottle(BaseThrottle):
    """Per API key, separate budgets for reads and writes (API_THROTTLE_RATES). Over budget:
    429 `throttled` with Retry-After."""

    def allow_request(self, request, view) -> bool:
        actor = request.auth
        if actor is None:  # unauthenticated requests are refused before they count
            return True
        kind = "read" if request.method in SAFE_METHODS else "write"
        self._wait = seconds_until_allowed(
            group=f"api-{kind}",
            key=str(actor.api_key_id or actor.name),
            rate=settings.API_THROTTLE_RATES.get(kind),
        )
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
