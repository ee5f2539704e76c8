"""Rate limits on top of django-ratelimit (fixed windows counted in the Redis cache).

One function for the API throttle and the admin login. It fails open: when Redis is away a
request is let through rather than refused, because availability of the registry matters more
than exact limits for the seconds the broker is down (and django-ratelimit would raise)."""

import logging

import redis
from django.http import HttpRequest
from django_ratelimit.core import get_usage

logger = logging.getLogger(__name__)


def seconds_until_allowed(request: HttpRequest, *, group: str, key: str, rate: str | None) -> int | None:
    """Count this request against `rate` (e.g. "600/m") for `key`; return None when it is
    allowed, or how many seconds to wait when it is over the limit."""
    if not rate:
        return None
    try:
        usage = get_usage(request, group=group, key=lambda _group, _request: key, rate=rate, increment=True)
    except (redis.RedisError, OSError):
        logger.warning("rate limit store unavailable; letting the request through", exc_info=True)
        return None
    if usage is None or not usage["should_limit"]:
        return None
    return max(1, usage["time_left"])
