"""Rate limits: fixed windows counted in Redis, for the API throttle and the admin login.

One pipelined round trip (INCR and EXPIRE of a key named after the window) on a long-lived
client. We tried django-ratelimit first: through Django's cache API it costs two round trips
and two client constructions per request, a third of a pinned-bundle fetch.

When Redis is away (an error, a timeout, or the process's circuit breaker open after one:
config.breaker) the API throttle fails open: a request is let through rather than refused,
because the registry staying available matters more than exact limits while Redis is down.
The admin login does not: password guessing must stay limited, so it falls back to counting
in this process (`local_fallback`), which limits each web process separately: a guesser gets
at most the rate times the number of processes."""

import threading
import time
from collections import Counter
from typing import Any

from django.conf import settings

from config import breaker
from config.redis_client import redis_client
from metrics import instruments

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """ "600/m" -> (600, 60). Also "10/5m" (10 per 5 minutes)."""
    count, _, per = rate.partition("/")
    multiple = int(per[:-1]) if len(per) > 1 else 1
    return int(count), multiple * PERIODS[per[-1]]


class LocalCounter:
    """Fixed-window counts in this process's memory, for when Redis cannot count. Old windows
    are dropped as time moves on, so memory is bounded by the keys seen in one window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._window: dict[str, int] = {}  # name -> window it counts

    def incr(self, name: str, window: int) -> int:
        with self._lock:
            if len(self._counts) > 10_000:  # many addresses: keep only the current windows
                for key in [k for k, w in self._window.items() if w != window]:
                    del self._counts[key], self._window[key]
            if self._window.get(name) != window:
                self._window[name], self._counts[name] = window, 0
            self._counts[name] += 1
            return self._counts[name]


local_counts = LocalCounter()


def _count_in_redis(name: str, period: int) -> int | None:
    def incr() -> int:
        pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
        pipe.incr(name)
        pipe.expire(name, period + 1)
        count, _ = pipe.execute()
        return int(count)

    return breaker.for_url(settings.REDIS_URL).call(incr, fallback=None)


def seconds_until_allowed(*, group: str, key: str, rate: str | None, local_fallback: bool = False) -> int | None:
    """Count one request against `rate` for `key`; None when allowed, else seconds to wait.
    Without Redis: allowed, or with `local_fallback` counted in this process instead."""
    if not rate:
        return None
    limit, period = parse_rate(rate)
    now = int(time.time())
    window = now // period
    name = f"registry:rl:{group}:{key}:{period}"
    count = _count_in_redis(f"{name}:{window}", period)
    if count is None:
        if not local_fallback:
            return None
        count = local_counts.incr(name, window)
    if count <= limit:
        return None
    instruments.THROTTLED.labels(group=group).inc()
    return max(1, (window + 1) * period - now)


def api_throttle_waits(*, requests: list[tuple[Any, str]]) -> list[int | None]:
    """api_throttle_wait for several (actor, method) requests at once (the fast lane's batched
    calls): one INCRBY per budget in one pipelined round trip, and each request gets the count
    it would have got one by one, in order, so the budget is the same to the request."""
    now = int(time.time())
    names: list[str | None] = []
    limits: dict[str, tuple[int, int, int, str]] = {}  # name -> (limit, period, window end, group)
    for actor, method in requests:
        kind = _kind(method)
        rate = settings.API_THROTTLE_RATES.get(kind)
        if not rate:
            names.append(None)
            continue
        limit, period = parse_rate(rate)
        window = now // period
        name = f"registry:rl:api-{kind}:{actor.api_key_id or actor.name}:{period}:{window}"
        limits[name] = (limit, period, (window + 1) * period, f"api-{kind}")
        names.append(name)
    wanted = Counter(name for name in names if name is not None)
    if not wanted:
        return [None] * len(requests)

    def incr() -> dict[str, int]:
        pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
        for name, n in wanted.items():
            pipe.incrby(name, n)
            pipe.expire(name, limits[name][1] + 1)
        totals = pipe.execute()[::2]
        return {name: int(total) for name, total in zip(wanted, totals, strict=True)}

    totals = breaker.for_url(settings.REDIS_URL).call(incr, fallback=None)
    if totals is None:
        return [None] * len(requests)  # fails open, as one by one
    seen: Counter[str] = Counter()
    waits: list[int | None] = []
    for budget in names:
        if budget is None:
            waits.append(None)
            continue
        seen[budget] += 1
        limit, _, window_end, group = limits[budget]
        if totals[budget] - wanted[budget] + seen[budget] <= limit:
            waits.append(None)
        else:
            instruments.THROTTLED.labels(group=group).inc()
            waits.append(max(1, window_end - now))
    return waits


def _kind(method: str) -> str:
    return "read" if method in ("GET", "HEAD", "OPTIONS") else "write"


def api_throttle_wait(*, actor, method: str) -> int | None:
    """The per-key API budget (API_THROTTLE_RATES): count this request of `actor` (an Actor)
    and return None when allowed, else seconds to wait. Reads are GET/HEAD/OPTIONS. The DRF
    throttle and the fast lane both call this."""
    kind = _kind(method)
    return seconds_until_allowed(
        group=f"api-{kind}", key=str(actor.api_key_id or actor.name), rate=settings.API_THROTTLE_RATES.get(kind)
    )
