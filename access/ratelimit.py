"""Rate limits: fixed windows counted in Redis, for the API throttle and the admin login.

One pipelined round trip (INCR and EXPIRE of a key named after the window) on a long-lived
client. We tried django-ratelimit first: through Django's cache API it costs two round trips
and two client constructions per request, a third of a pinned-bundle fetch. It fails open:
when Redis is away a request is let through rather than refused, because the registry staying
available matters more than exact limits while the broker is down."""

import logging
import time

import redis
from django.conf import settings

from config.redis_client import redis_client

logger = logging.getLogger(__name__)
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """ "600/m" -> (600, 60). Also "10/5m" (10 per 5 minutes)."""
    count, _, per = rate.partition("/")
    multiple = int(per[:-1]) if len(per) > 1 else 1
    return int(count), multiple * PERIODS[per[-1]]


def seconds_until_allowed(*, group: str, key: str, rate: str | None) -> int | None:
    """Count one request against `rate` for `key`; None when allowed, else seconds to wait."""
    if not rate:
        return None
    limit, period = parse_rate(rate)
    now = int(time.time())
    window = now // period
    name = f"registry:rl:{group}:{key}:{period}:{window}"
    try:
        pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
        pipe.incr(name)
        pipe.expire(name, period + 1)
        count, _ = pipe.execute()
    except redis.RedisError:
        logger.warning("rate limit store unavailable; letting the request through", exc_info=True)
        return None
    if count <= limit:
        return None
    return max(1, (window + 1) * period - now)


def api_throttle_wait(*, actor, method: str) -> int | None:
    """The per-key API budget (API_THROTTLE_RATES): count this request of `actor` (an Actor)
    and return None when allowed, else seconds to wait. Reads are GET/HEAD/OPTIONS. The DRF
    throttle and the fast lane both call this."""
    kind = "read" if method in ("GET", "HEAD", "OPTIONS") else "write"
    return seconds_until_allowed(
        group=f"api-{kind}", key=str(actor.api_key_id or actor.name), rate=settings.API_THROTTLE_RATES.get(kind)
    )
