"""The Redis circuit breaker (core.breaker) and the request paths behind it, with Redis hung
(a listener that accepts connections and never answers, which is what a SIGSTOPped Redis looks
like from outside) or unreachable (a closed port)."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

from access.ratelimit import local_counts, seconds_until_allowed
from core import breaker
from core.breaker import CircuitBreaker
from core.enqueue import send
from registry import bundle_cache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_opens_on_a_failure_and_lets_one_probe_through_after_the_cooldown():
    clock = Clock()
    b = CircuitBreaker("t", cooldown=1, max_cooldown=8, clock=clock)
    assert b.allow() and b.state == "closed"
    b.failed()
    assert b.state == "open"
    assert not b.allow()
    clock.now += 1
    assert b.allow()  # the probe
    assert b.state == "half-open"
    assert not b.allow()  # only one
    b.succeeded()
    assert b.state == "closed" and b.allow()


def test_it_doubles_the_cooldown_while_probes_fail_and_resets_it_on_success():
    clock = Clock()
    b = CircuitBreaker("t", cooldown=1, max_cooldown=4, clock=clock)
    b.failed()
    waits = []
    for _ in range(4):
        waited = 0
        while not b.allow():
            clock.now += 0.5
            waited += 0.5
        waits.append(waited)
        b.failed()
    assert waits == [1, 2, 4, 4]
    clock.now += 4
    assert b.allow()
    b.succeeded()
    b.failed()
    clock.now += 1
    assert b.allow()  # back to the base cooldown


def test_a_probe_that_never_reports_does_not_keep_it_half_open_for_ever():
    clock = Clock()
    b = CircuitBreaker("t", cooldown=1, max_cooldown=4, clock=clock)
    b.failed()
    clock.now += 1
    assert b.allow()  # this probe's thread dies without a word
    clock.now += 3
    assert not b.allow()
    clock.now += 1
    assert b.allow()


def test_call_takes_the_fallback_on_an_outage_and_propagates_bugs():
    b = CircuitBreaker("t")

    def hung() -> str:
        raise TimeoutError

    assert b.call(hung, fallback="fallback") == "fallback"
    assert b.state == "open"
    assert b.call(lambda: "never called", fallback="fallback") == "fallback"
    b.succeeded()
    with pytest.raises(ZeroDivisionError):
        b.call(lambda: 1 / 0, fallback=None)
    assert b.state == "closed"  # a bug is not an outage


@pytest.fixture
def hung_redis() -> Iterator[str]:
    """A TCP server that accepts connections and never answers: a hung Redis."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    yield url
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()
    breaker.for_url(url).succeeded()


def _timed(fn) -> float:
    began = time.monotonic()
    fn()
    return time.monotonic() - began


def test_with_redis_hung_one_call_pays_the_timeout_and_the_rest_skip_redis(db, v1, hung_redis):
    urls = {"REDIS_URL": hung_redis, "BUNDLE_CACHE_URL": hung_redis, "CELERY_BROKER_URL": hung_redis}
    with override_settings(REDIS_REQUEST_TIMEOUT_MS=50, **urls):
        first = _timed(lambda: seconds_until_allowed(group="t", key="k", rate="1/m"))
        assert first < 0.5
        assert breaker.for_url(hung_redis).state == "open"
        later = [
            _timed(lambda: seconds_until_allowed(group="t", key="k", rate="1/m")),
            _timed(lambda: bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash)),
            _timed(lambda: send("sessions_app.tasks.version_drain_task", what="a drain", version_id=v1.pk)),
        ]
        assert max(later) < 0.02, later  # no socket wait at all: the breaker answered
        assert bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash) == bytes(v1.canonical)
        # After the cooldown one probe goes to Redis (and pays the timeout again); the rest skip.
        time.sleep(1.05)
        sent: list[bool] = []
        probe = _timed(
            lambda: sent.append(send("sessions_app.tasks.version_drain_task", what="a drain", version_id=v1.pk))
        )
        assert sent == [False] and probe >= 0.04, probe  # the probe went to Redis and waited out its timeout
        assert breaker.for_url(hung_redis).state == "open"
        assert _timed(lambda: seconds_until_allowed(group="t", key="k", rate="1/m")) < 0.02  # open again: skipped


def test_enqueue_through_a_live_broker_succeeds(db):
    # The request path's own connection (short timeouts) really publishes.
    assert send("sessions_app.tasks.sweep_task", what="a sweep") is True


def test_the_api_throttle_fails_open_and_the_admin_login_limit_counts_locally_without_redis(client, db):
    closed = "redis://127.0.0.1:1/0"
    with override_settings(REDIS_URL=closed, ADMIN_LOGIN_RATE="10/m", REDIS_REQUEST_TIMEOUT_MS=50):
        assert seconds_until_allowed(group="api-read", key="k", rate="1/m") is None
        assert seconds_until_allowed(group="api-read", key="k", rate="1/m") is None  # fails open
        local_counts.__init__()
        statuses = [
            client.post("/admin/login/", {"username": "admin", "password": f"wrong-{i}"}).status_code for i in range(12)
        ]
    breaker.for_url(closed).succeeded()
    assert statuses[:10] == [200] * 10
    assert statuses[10:] == [429, 429]


def test_threads_queued_behind_a_hung_publish_do_not_each_pay_a_timeout(db, hung_redis):
    urls = {"REDIS_URL": hung_redis, "BUNDLE_CACHE_URL": hung_redis, "CELERY_BROKER_URL": hung_redis}
    with override_settings(REDIS_REQUEST_TIMEOUT_MS=200, **urls):
        took: list[float] = []

        def publish() -> None:
            took.append(_timed(lambda: send("sessions_app.tasks.sweep_task", what="a sweep")))

        threads = [threading.Thread(target=publish) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # One publish pays the hung broker's timeout; the others wait for it, then skip the broker
    # (before: each paid its own, one after the other, 8 x 200 ms and more for the last).
    assert max(took) < 1.0, took
