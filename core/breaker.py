"""A per-process circuit breaker for the Redis calls on the request path (rate limits, the bytes
cache, enqueueing tasks), so that a hung Redis costs one short timeout per process and cooldown,
not one or more per request.

    closed --(a timeout or connection error)--> open --(cooldown over)--> half-open
    half-open: exactly one caller (the probe) goes through; success closes, failure re-opens
    with the cooldown doubled (up to `max_cooldown`), so a long outage is probed rarely.

While open, callers skip Redis and take their fallback (the rate limit lets the request
through, the bytes come from the database, a drain waits for the sweep). One failure is enough
to open: Redis on the request path answers in well under a millisecond, so one timeout means it
is down or hung, and a wrongly opened breaker only costs a few seconds of fail-open.

The breaker does no I/O and holds its lock only to read and set a few fields, so the same
object serves threads (Django on the web thread pool) and async code on the event loop.
Breakers are per process and per Redis server (`for_url`): the rate limit, the bytes cache and
the broker on one server open and close together."""

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

import redis

logger = logging.getLogger(__name__)
T = TypeVar("T")

# What says "Redis is not answering" (as opposed to "Redis answered with an error", such as a
# wrong type, which is a bug and must not open the breaker): redis-py's own errors, the socket's,
# and kombu's (a publish wraps redis-py's errors in kombu.exceptions.OperationalError).
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError, TimeoutError)
# Redis answered but refused the write: full (maxmemory with noeviction, as compose runs the
# broker's server) or a read-only replica after a failover. Not an outage (the breaker stays
# closed: reads and other calls still work), but no reason to fail the request either: the
# caller gets its fallback (cache: from the database; rate limit: not counted).
REFUSED_ERRORS: tuple[type[BaseException], ...] = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
try:
    from kombu.exceptions import OperationalError as KombuOperationalError

    OUTAGE_ERRORS += (KombuOperationalError,)
except ImportError:  # kombu comes with Celery; the breaker does not need it
    pass


class CircuitBreaker:
    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"

    def __init__(
        self,
        name: str,
        *,
        cooldown: float = 1.0,
        max_cooldown: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.base_cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.clock = clock
        self._lock = threading.Lock()
        self._state = self.CLOSED
        self._cooldown = cooldown
        self._opened_at = 0.0
        self._probe_started = 0.0

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    def allow(self) -> bool:
        """May this caller use Redis now? Every True must be followed by succeeded() or failed()."""
        with self._lock:
            if self._state == self.CLOSED:
                return True
            now = self.clock()
            if self._state == self.OPEN and now - self._opened_at >= self._cooldown:
                self._state = self.HALF_OPEN
                self._probe_started = now
                return True
            # A probe that never reported (its thread died) must not keep the breaker half-open.
            if self._state == self.HALF_OPEN and now - self._probe_started >= self.max_cooldown:
                self._probe_started = now
                return True
            return False

    def succeeded(self) -> None:
        with self._lock:
            if self._state == self.CLOSED:
                return
            self._state, self._cooldown = self.CLOSED, self.base_cooldown
        logger.warning("redis breaker %s closed: Redis answers again", self.name)

    def failed(self, exc: BaseException | None = None) -> None:
        with self._lock:
            if self._state == self.HALF_OPEN:
                self._cooldown = min(self._cooldown * 2, self.max_cooldown)
            elif self._state == self.OPEN:
                return  # a caller that went in before it opened; already counted
            self._state, self._opened_at = self.OPEN, self.clock()
            cooldown = self._cooldown
        logger.warning(
            "redis breaker %s open for %.0f s after %s: skipping Redis (rate limits fail open, "
            "bytes come from the database, drains wait for the sweep)",
            self.name,
            cooldown,
            type(exc).__name__ if exc else "a failure",
        )

    def call(self, fn: Callable[[], T], *, fallback: T) -> T:
        """fn() unless the breaker is open; `fallback` when it is open or Redis does not answer.
        Errors other than an outage (a bug) propagate, and count as Redis having answered."""
        if not self.allow():
            return fallback
        try:
            result = fn()
        except OUTAGE_ERRORS as exc:
            self.failed(exc)
            return fallback
        except REFUSED_ERRORS:
            self.succeeded()
            return fallback
        except BaseException:
            self.succeeded()
            raise
        self.succeeded()
        return result


@functools.cache
def _for_server(server: str) -> CircuitBreaker:
    return CircuitBreaker(server)


def for_url(url: str) -> CircuitBreaker:
    """The process's breaker for the Redis server of `url` (databases on one server share it)."""
    parts = urlsplit(url)
    return _for_server(f"{parts.hostname or parts.path}:{parts.port or 6379}")
