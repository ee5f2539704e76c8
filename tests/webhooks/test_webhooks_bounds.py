"""Webhook deliveries stay bounded whatever a receiver does (issue 18): one attempt ends within
its wall-clock deadline even when the receiver trickles its answer, a due delivery is queued
once (the sweep does not queue it again while its message waits), one endpoint has at most
WEBHOOK_ENDPOINT_CONCURRENCY attempts queued or in flight, and the attempt connects to the
address that was checked (no second DNS lookup). Real PostgreSQL, real Redis (the broker's
`deliveries` list is read), real receivers on 127.0.0.1; only DNS answers are faked."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from access.models import Role
from chaos.tarpit import Tarpit
from config.celery import app as celery_app
from tests.conftest import make_api
from tests.live import purge_queues
from tests.webhooks.test_webhooks import API, Receiver
from webhooks import services
from webhooks.models import Delivery, DeliveryStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin(db):
    return make_api(Role.ADMIN)


def _endpoint(admin, url: str, events: list[str] | None = None) -> int:
    response = admin.post(API, {"url": url, "events": events or ["label.moved"]})
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def _queued() -> int:
    with celery_app.connection_for_write() as conn:
        return int(conn.default_channel.client.llen("deliveries"))


def _emit(count: int) -> None:
    """`count` label.moved events, committed: each queues what its endpoints have room for."""
    for i in range(count):
        services.event_emit(event="label.moved", data={"bundle": "b", "n": i})


class Gate:
    """A receiver that holds every request until released (a slow receiver), then answers 200."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived: list[float] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                gate.arrived.append(time.monotonic())
                gate.release.wait(30)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_an_attempt_ends_at_its_deadline_when_the_receiver_trickles(admin, settings):
    """Before: the 10 s timeout was per read, so one byte every 0.3 s held the attempt for as
    long as the receiver liked (here 30 s)."""
    settings.WEBHOOK_ATTEMPT_DEADLINE = 2
    pit = Tarpit(drip=0.3, hold=30)
    try:
        _endpoint(admin, pit.url)
        _emit(1)
        delivery = Delivery.objects.get()
        began = time.monotonic()
        assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.PENDING
        took = time.monotonic() - began
        delivery.refresh_from_db()
    finally:
        pit.close()
    assert 1.5 < took < 3.5, took
    assert delivery.response_status is None and "deadline" in delivery.error, delivery.error
    assert delivery.attempts == 1 and delivery.sending_until is None  # its slot is free again
    assert delivery.next_attempt_at is not None  # retried on the schedule


def test_the_sweep_queues_a_due_delivery_once(admin, settings):
    """Before: every 5 s sweep sent every due delivery again, whether or not the last message
    had been picked up, so a backlog grew the queue by its size every sweep."""
    settings.WEBHOOK_ENDPOINT_CONCURRENCY = 3
    purge_queues()
    receiver = Receiver([])
    try:
        _endpoint(admin, receiver.url)
        _emit(10)  # nobody consumes the queue here: as if every worker slot were busy
        assert Delivery.objects.filter(status="pending").count() == 10
        assert _queued() == 3  # the endpoint's limit, not 10
        for _ in range(5):
            services.deliveries_queue_due()  # what the sweep does every 5 s
        assert _queued() == 3
        assert set(services.deliveries_due()) == set(
            Delivery.objects.filter(queued_until__isnull=True).values_list("pk", flat=True)
        )
        # A lease that ran out (the message was lost, e.g. Redis restarted empty): queued again.
        Delivery.objects.filter(queued_until__isnull=False).update(queued_until="2000-01-01T00:00:00Z")
        assert len(services.deliveries_queue_due()) == 3
        assert _queued() == 6
    finally:
        receiver.close()
        purge_queues()


def test_one_endpoint_cannot_take_every_slot(admin, settings):
    """A slow receiver gets at most WEBHOOK_ENDPOINT_CONCURRENCY attempts at once; another
    endpoint's deliveries go through meanwhile, and each finished attempt queues the slow
    endpoint's next one."""
    settings.WEBHOOK_ENDPOINT_CONCURRENCY = 1
    purge_queues()
    slow, fast = Gate(), Receiver([])
    try:
        slow_id = _endpoint(admin, slow.url)
        _emit(3)
        fast_id = _endpoint(admin, fast.url, ["version.published"])
        services.event_emit(event="version.published", data={"bundle": "b"})
        first, second, third = Delivery.objects.filter(endpoint_id=slow_id).order_by("id")
        results: list[str | None] = []
        holder = threading.Thread(target=lambda: results.append(services.delivery_attempt(delivery_id=first.pk)))
        holder.start()
        deadline = time.monotonic() + 10
        while not slow.arrived and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slow.arrived, "the first attempt never reached the slow receiver"
        # A second worker slot asked to send the slow endpoint's next delivery: refused, left due.
        assert services.delivery_attempt(delivery_id=second.pk) == "busy"
        second.refresh_from_db()
        assert second.status == "pending" and second.attempts == 0 and second.queued_until is None
        assert len(slow.arrived) == 1
        # The other endpoint is not held up.
        (other,) = Delivery.objects.filter(endpoint_id=fast_id)
        assert services.delivery_attempt(delivery_id=other.pk) == DeliveryStatus.SUCCEEDED
        slow.release.set()
        holder.join(10)
        assert results == [DeliveryStatus.SUCCEEDED]
        # The freed slot went to the slow endpoint's next delivery: queued, the third not yet.
        second.refresh_from_db()
        third.refresh_from_db()
        assert second.queued_until is not None and third.queued_until is None
    finally:
        slow.close()
        fast.close()
        purge_queues()


def _fake_dns(monkeypatch, host: str, answers: list[str]) -> list[str]:
    """getaddrinfo for `host` answers from `answers` in turn (the last one from then on), like
    an attacker's DNS server with a zero TTL; every other name resolves as usual."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def fake(name, port, *args, **kwargs):
        if name != host:
            return real(name, port, *args, **kwargs)
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(answer)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return asked


def test_an_attempt_connects_to_the_address_it_checked(admin, settings, monkeypatch):
    """DNS rebinding: the name resolves to a public address for the check and to 127.0.0.1 for
    the connect. Before, httpx resolved again after the check and posted to the loopback
    receiver; now the one checked address is the one connected to (here it does not answer:
    the attempt fails within its deadline and nothing reaches loopback)."""
    receiver = Receiver([])
    try:
        port = receiver.server.server_address[1]
        _endpoint(admin, receiver.url)  # saved while private URLs are allowed
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
        settings.WEBHOOK_ATTEMPT_DEADLINE = 1
        from webhooks.models import Endpoint

        Endpoint.objects.update(url=f"http://rebind.example:{port}/hook")
        asked = _fake_dns(monkeypatch, "rebind.example", ["192.0.2.10", "127.0.0.1"])  # TEST-NET-1, then loopback
        monkeypatch.setattr("ipaddress.IPv4Address.is_global", property(lambda self: str(self) == "192.0.2.10"))
        _emit(1)
        delivery = Delivery.objects.get()
        assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.PENDING
        delivery.refresh_from_db()
        assert receiver.requests == [], "the attempt connected to an address it never checked"
        assert asked == ["192.0.2.10"], asked  # one lookup
        assert delivery.response_status is None
    finally:
        receiver.close()


def test_the_pinned_connection_keeps_the_host_header(admin, monkeypatch):
    """Pinned to the checked address, the request still names the URL's host (Host header;
    for https the TLS server name and the certificate check too)."""
    receiver = Receiver([])
    try:
        port = receiver.server.server_address[1]
        _endpoint(admin, f"http://hooks.example:{port}/hook")
        asked = _fake_dns(monkeypatch, "hooks.example", ["127.0.0.1", "127.0.0.2"])
        _emit(1)
        delivery = Delivery.objects.get()
        assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.SUCCEEDED
        assert asked == ["127.0.0.1"]
        ((headers, _),) = receiver.requests
        assert headers["host"] == f"hooks.example:{port}"
    finally:
        receiver.close()
