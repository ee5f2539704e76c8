"""Rate limits: fixed windows counted in Redis, for the API throttle and the admin login.

One pipelined round trip (INCR and EXPIRE of a key named after the window) on a long-lived
client. We tried django-ratelimit first: through Django's cache API it costs two round trips
and two client constructions per request, a third of a pinned-bundle fetch.

When Redis is away (an error, a timeout, or the process's circuit breaker open after one:
core.breaker) the API throttle fails open: a request is let through rather than refused,
because the registry staying available matters more than exact limits while Redis is down.
The admin login does not: password guessing must stay limited, so it falls back to counting
in this process (`local_fallback`), which limits each web process separately: a guesser gets
at most the rate times the number of processes."""

import functools
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core import breaker, instruments
from core.redis_client import redis_client

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


def _window(rate: str, now: int) -> tuple[int, int, int]:
    """(limit, period, index of the window holding `now`) of a rate such as "600/m"."""
    limit, period = parse_rate(rate)
    return limit, period, now // period


def _counted(budgets: dict[str, tuple[int, int]]) -> dict[str, int] | None:
    """Add n to each budget (name -> (n, period)) in one pipelined round trip; the new totals,
    or None when Redis cannot count (an error, a timeout, the breaker open)."""

    def incr() -> dict[str, int]:
        pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
        for name, (n, period) in budgets.items():
            pipe.incrby(name, n)
            pipe.expire(name, period + 1)
        totals = pipe.execute()[::2]
        return {name: int(total) for name, total in zip(budgets, totals, strict=True)}

    return breaker.for_url(settings.REDIS_URL).call(incr, fallback=None)


def _wait(*, count: int, limit: int, group: str, period: int, window: int, now: int) -> int | None:
    """None when the count is within the limit, else the seconds until the next window."""
    if count <= limit:
        return None
    instruments.throttled(group=group)
    return max(1, (window + 1) * period - now)


def seconds_until_allowed(*, group: str, key: str, rate: str | None, local_fallback: bool = False) -> int | None:
    """Count one request against `rate` for `key`; None when allowed, else seconds to wait.
    Without Redis: allowed, or with `local_fallback` counted in this process instead."""
    if not rate:
        return None
    now = int(time.time())
    limit, period, window = _window(rate, now)
    name = f"registry:rl:{group}:{key}:{period}"
    totals = _counted({f"{name}:{window}": (1, period)})
    if totals is not None:
        count = totals[f"{name}:{window}"]
    elif local_fallback:
        count = local_counts.incr(name, window)
    else:
        return None
    return _wait(count=count, limit=limit, group=group, period=period, window=window, now=now)


def auth_failure_wait(*, client_ip: str | None) -> int | None:
    """Count one request from `client_ip` whose API key is not a working key against
    AUTH_FAILURE_RATE: None while within it (answer 401), else the seconds to wait (answer 429).
    Only failures are counted (one round trip each), so a working key's request pays nothing and
    is never refused by it, also from an address shared with a guesser. Fails open without
    Redis (the breaker's rules), like the API budgets: a 401 then."""
    return seconds_until_allowed(group="auth-failure", key=client_ip or "unknown", rate=settings.AUTH_FAILURE_RATE)


def api_throttle_waits(*, requests: list[tuple[Any, str]]) -> list[int | None]:
    """The per-key API budget (API_THROTTLE_RATES) for (actor, method) requests: count them and
    return for each None when allowed, else seconds to wait. Reads are GET/HEAD/OPTIONS. One
    INCRBY per budget in one pipelined round trip, and each request gets the count it would
    have got one by one, in order (the fast lane's batched calls count a whole batch at once).
    Fails open without Redis."""
    now = int(time.time())
    budgets = [_budget(actor, method, now) for actor, method in requests]
    wanted = Counter(budget[0] for budget in budgets if budget is not None)
    periods = {budget[0]: budget[2] for budget in budgets if budget is not None}
    totals = _counted({name: (n, periods[name]) for name, n in wanted.items()}) if wanted else None
    if totals is None:
        return [None] * len(requests)
    seen: Counter[str] = Counter()
    waits: list[int | None] = []
    for budget in budgets:
        if budget is None:
            waits.append(None)
            continue
        name, limit, period, window, group = budget
        seen[name] += 1
        count = totals[name] - wanted[name] + seen[name]
        waits.append(_wait(count=count, limit=limit, group=group, period=period, window=window, now=now))
    return waits


def _kind(method: str) -> str:
    return "read" if method in ("GET", "HEAD", "OPTIONS") else "write"


def _budget(actor: Any, method: str, now: int) -> tuple[str, int, int, int, str] | None:
    """(counter name, limit, period, window, group) of the API budget a request counts against,
    or None when its kind has no rate (API_THROTTLE_RATES)."""
    kind = _kind(method)
    rate = settings.API_THROTTLE_RATES.get(kind)
    if not rate:
        return None
    limit, period, window = _window(rate, now)
    group = f"api-{kind}"
    return f"registry:rl:{group}:{actor.api_key_id or actor.name}:{period}:{window}", limit, period, window, group


def api_throttle_wait(*, actor: Any, method: str) -> int | None:
    """api_throttle_waits for one request: what the DRF throttle and the fast lane's
    one-by-one path call."""
    return api_throttle_waits(requests=[(actor, method)])[0]


# --- Concurrency: how many calls one key may have running at once -------------------------------

# One atomic step in Redis: drop the slots whose holders are overdue (a process that died holding
# one), then take a slot if fewer than the limit are held. Slots are members of a sorted set
# scored by when they lapse, so a lost release costs a slot for `hold` seconds at most.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class LocalSlots:
    """Slots counted in this process when Redis cannot count them (so the limit then holds per
    process: it still keeps one key from holding every thread of a worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def acquire(self, name: str, limit: int) -> bool:
        with self._lock:
            if self._held[name] >= limit:
                return False
            self._held[name] += 1
            return True

    def release(self, name: str) -> None:
        with self._lock:
            self._held[name] -= 1
            if self._held[name] <= 0:
                del self._held[name]


local_slots = LocalSlots()


class Slot:
    """A slot taken by concurrency_slot(); give it back with release() (or use it as a context)."""

    def __init__(self, name: str, token: str | None) -> None:
        self.name = name
        self.token = token  # None: counted in this process (Redis could not count it)

    def release(self) -> None:
        if self.token is None:
            local_slots.release(self.name)
            return
        token = self.token

        def zrem() -> None:
            redis_client(settings.REDIS_URL).zrem(self.name, token)

        breaker.for_url(settings.REDIS_URL).call(zrem, fallback=None)  # if lost, it lapses after `hold`

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class SlotSpec:
    """Which slots a call takes one of: `limit` of `key` in `group`, each lapsing after `hold` s."""

    group: str
    key: str
    limit: int
    hold: float

    @property
    def name(self) -> str:
        return f"registry:cc:{self.group}:{self.key}"

    def args(self, now: float, token: str) -> list[Any]:
        return [now, now + self.hold, self.limit, token, int(self.hold * 1000) + 1000]


def _slot_of(spec: SlotSpec, token: str, taken: bool | None) -> Slot | None:
    """The slot the acquire gave (taken None: Redis could not count, so this process counts)."""
    slot = (Slot(spec.name, None) if local_slots.acquire(spec.name, spec.limit) else None) if taken is None else None
    if taken:
        slot = Slot(spec.name, token)
    if slot is None:
        instruments.throttled(group=spec.group)
    return slot


def concurrency_slot(*, group: str, key: str, limit: int, hold: float) -> Slot | None:
    """Take one of `limit` slots of `key` shared by every process through Redis; None when all
    are held (the caller answers 429). A slot lapses `hold` seconds after it was taken, in case
    its holder died. Without Redis (an error, a timeout, the breaker open) the slots are counted
    in this process instead."""
    return slot_take(SlotSpec(group=group, key=key, limit=limit, hold=hold))


def slot_take(spec: SlotSpec) -> Slot | None:
    """concurrency_slot for a SlotSpec."""
    token = uuid.uuid4().hex

    def acquire() -> bool:
        script = _script(settings.REDIS_URL, _ACQUIRE)
        return bool(script(keys=[spec.name], args=spec.args(time.time(), token)))

    return _slot_of(spec, token, breaker.for_url(settings.REDIS_URL).call(acquire, fallback=None))


# The API budget counted (api_throttle_waits' INCRBY and EXPIRE) and, unless it refuses the
# call, a slot taken as _ACQUIRE takes it: one round trip where there were two.
# Returns {count, 1 taken | 0 all held | -1 refused by the budget, no slot asked for}.
_COUNT_ACQUIRE = """
local count = redis.call('INCRBY', KEYS[1], 1)
redis.call('EXPIRE', KEYS[1], ARGV[1])
if count > tonumber(ARGV[2]) then
  return {count, -1}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  return {count, 0}
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
return {count, 1}
"""


def api_throttle_wait_then_slot(*, actor: Any, method: str, spec: SlotSpec | None) -> tuple[int | None, Slot | None]:
    """api_throttle_wait, then (when the call is within its budget and `spec` is given) one of
    the spec's slots as concurrency_slot takes it, in one round trip: (wait, slot). The slot is
    None when not asked for, when the budget refused the call (wait set) or when all are held.
    Without Redis each falls back as it does alone: the budget open, the slots in this process."""
    if spec is None:
        return api_throttle_wait(actor=actor, method=method), None
    now = time.time()
    budget = _budget(actor, method, int(now))
    if budget is None:
        return None, slot_take(spec)
    name, limit, period, window, group = budget
    token = uuid.uuid4().hex

    def count_acquire() -> tuple[int, int]:
        script = _script(settings.REDIS_URL, _COUNT_ACQUIRE)
        count, taken = script(keys=[name, spec.name], args=[period + 1, limit, *spec.args(now, token)])
        return int(count), int(taken)

    found = breaker.for_url(settings.REDIS_URL).call(count_acquire, fallback=None)
    if found is None:  # the budget fails open; the slots are counted in this process
        return None, _slot_of(spec, token, None)
    count, taken = found
    wait = _wait(count=count, limit=limit, group=group, period=period, window=window, now=int(now))
    if wait is not None:
        return wait, None
    return None, _slot_of(spec, token, taken == 1)


@functools.cache
def _script(url: str, text: str) -> Any:
    return redis_client(url).register_script(text)  # EVALSHA, loading the script once


def file_tool_slot(*, actor: Any) -> Slot | None:
    """A slot for one of the model's file tools (ls, glob, grep, read) under FILE_TOOL_CONCURRENCY
    per key: a slow grep holds a web thread for up to seconds, and one key must not hold them all."""
    return concurrency_slot(
        group="file-tools",
        key=str(actor.api_key_id or actor.name),
        limit=settings.FILE_TOOL_CONCURRENCY,
        hold=settings.FILE_TOOL_SLOT_SECONDS,
    )


def turn_slot_spec(actor: Any) -> SlotSpec:
    """The slots of turn calls: TURN_CONCURRENCY per key. A turn of a long conversation costs up
    to a fraction of a second of CPU on a web thread, and one key must not hold them all (issue 36)."""
    key = str(actor.api_key_id or actor.name)
    return SlotSpec(group="turn", key=key, limit=settings.TURN_CONCURRENCY, hold=settings.TURN_SLOT_SECONDS)


def turn_slot(*, actor: Any) -> Slot | None:
    """A slot for one turn call (turn_slot_spec); None when the key holds all of them."""
    return slot_take(turn_slot_spec(actor))
