"""Webhooks: endpoints managed by admins, Standard Webhooks signatures checked by a real
receiver on 127.0.0.1 with the same `standardwebhooks` package, retries, switch-off."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from access.models import Role
from audit.models import AuditEvent
from core import urlcheck
from tests.conftest import make_api
from webhooks import services
from webhooks.models import Delivery, DeliveryStatus, Endpoint

API = "/api/v1/webhooks/"


class Receiver:
    """A real HTTP server that records every request and answers from a script of statuses."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def admin(db):
    return make_api(Role.ADMIN)


@pytest.fixture
def receiver():
    r = Receiver([])
    yield r
    r.close()


def _create(admin, url: str, events: list[str]) -> dict:
    response = admin.post(API, {"url": url, "events": events, "description": "ops channel"})
    assert response.status_code == 201, response.json()
    return response.json()


def test_it_lets_only_admins_manage_endpoints(db, ops, receiver):
    assert ops.post(API, {"url": receiver.url, "events": ["label.moved"]}).status_code == 403
    assert ops.get(API).status_code == 403
    assert not Endpoint.objects.exists()


def test_it_shows_the_secret_once_and_audits_the_change(admin, receiver):
    created = _create(admin, receiver.url, ["label.moved", "version.published"])
    assert created["secret"].startswith("whsec_")
    assert created["events"] == ["label.moved", "version.published"]
    shown = admin.get(f"{API}{created['id']}/").json()
    assert "secret" not in shown
    listed = admin.get(API).json()["results"]
    assert [e["id"] for e in listed] == [created["id"]] and "secret" not in listed[0]
    event = AuditEvent.objects.get(action="webhook.created")
    assert created["secret"] not in json.dumps(event.data)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://localhost/x",
        "http://10.1.2.3/",
        "http://169.254.169.254/latest",
        "http://[::1]/",
        # Issue 36: IPv6 forms of private IPv4 addresses (NAT64, mapped, compatible, 6to4, local NAT64).
        "http://[64:ff9b::a00:1]/",
        "http://[64:ff9b::a9fe:a9fe]/latest",
        "http://[::ffff:10.0.0.1]/",
        "http://[::ffff:0:a00:1]/",
        "http://[::a00:1]/",
        "http://[::127.0.0.1]/",
        "http://[2002:a00:1::1]/",
        "http://[64:ff9b:1::808:808]/",
    ],
)
def test_it_refuses_private_addresses_unless_allowed(admin, settings, url):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    response = admin.post(API, {"url": url, "events": ["label.moved"]})
    assert response.status_code == 400
    assert "url" in response.json()["error"]["details"]


@pytest.mark.parametrize("url", ["http://[64:ff9b::808:808]/", "http://[2002:808:808::1]/", "http://8.8.8.8/"])
def test_it_accepts_ipv6_forms_of_public_ipv4_addresses(settings, url):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    assert urlcheck.check_url(url) == url


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://example.com/", "events": ["label.moved"]},
        {"url": "http://user:pw@127.0.0.1/", "events": ["label.moved"]},
        {"url": "http://127.0.0.1/", "events": ["label.exploded"]},
        {"url": "http://127.0.0.1/", "events": []},
        {"url": "http://127.0.0.1/", "events": ["label.moved"], "secret": "mine"},
    ],
)
def test_it_refuses_bad_endpoints_with_the_error_shape(admin, body):
    response = admin.post(API, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert not Endpoint.objects.exists()


def test_it_signs_deliveries_that_the_receiver_verifies(admin, receiver, django_capture_on_commit_callbacks):
    created = _create(admin, receiver.url, ["label.moved"])
    with django_capture_on_commit_callbacks(execute=False):
        assert services.event_emit(event="label.moved", data={"bundle": "refunds", "label": "production"}) == 1
        assert services.event_emit(event="version.published", data={"bundle": "refunds"}) == 0  # not subscribed
    delivery = Delivery.objects.get()
    assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.SUCCEEDED
    headers, body = receiver.requests[0]
    payload = Webhook(created["secret"]).verify(body, headers)  # raises if the signature is wrong
    assert payload["type"] == "label.moved" and payload["data"] == {"bundle": "refunds", "label": "production"}
    assert headers["webhook-id"] == delivery.message_id
    with pytest.raises(WebhookVerificationError):
        Webhook(services.new_secret()).verify(body, headers)
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and delivery.response_status == 200 and delivery.latency_ms is not None
    # Idempotent: a redelivered task finds nothing to do.
    assert services.delivery_attempt(delivery_id=delivery.pk) is None
    assert len(receiver.requests) == 1


def test_it_retries_with_backoff_and_switches_off_after_persistent_failure(admin, django_capture_on_commit_callbacks):
    failing = Receiver([500] * 100)
    try:
        created = _create(admin, failing.url, ["version.revoked"])
        with django_capture_on_commit_callbacks(execute=False):
            services.event_emit(event="version.revoked", data={"bundle": "b", "version": 1})
        delivery = Delivery.objects.get()
        before = timezone.now()
        assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.PENDING
        delivery.refresh_from_db()
        assert delivery.response_status == 500
        # The first retry is due 5 s later (the 5 s sweep sends it within 10 s).
        assert timedelta(seconds=4) < delivery.next_attempt_at - before < timedelta(seconds=7)
        assert services.delivery_attempt(delivery_id=delivery.pk) is None  # not due yet
        gaps = []
        for _ in range(len(services.RETRY_SCHEDULE)):
            due = delivery.next_attempt_at
            gaps.append(round((due - delivery.last_attempt_at).total_seconds()))
            Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())  # time passes
            services.delivery_attempt(delivery_id=delivery.pk)
            delivery.refresh_from_db()
        assert gaps == list(services.RETRY_SCHEDULE)
        assert sum(gaps) > 24 * 3600  # retries span more than a day
        assert delivery.status == DeliveryStatus.FAILED
        assert delivery.attempts == len(services.RETRY_SCHEDULE) + 1 == len(failing.requests)
        endpoint = Endpoint.objects.get(pk=created["id"])
        assert not endpoint.active and "failed" in endpoint.disabled_reason
        assert AuditEvent.objects.filter(action="webhook.disabled", target=str(endpoint.pk)).exists()
        # Switched off: new events go nowhere, redelivery is refused until it is switched on.
        assert services.event_emit(event="version.revoked", data={"bundle": "b", "version": 2}) == 0
        path = f"{API}{endpoint.pk}/deliveries/{delivery.pk}/redeliver/"
        assert admin.post(path).json()["error"]["code"] == "conflict"
        patch = admin.client.patch(f"{API}{endpoint.pk}/", {"active": True}, format="json")
        assert patch.status_code == 200 and patch.json()["disabled_reason"] == ""
        failing.statuses = [200]
        with django_capture_on_commit_callbacks(execute=True):
            assert admin.post(path).json()["status"] == "pending"
        services.delivery_attempt(delivery_id=delivery.pk)  # what the enqueued task does
        delivery.refresh_from_db()
        assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempts == 1
        assert failing.requests[-1][0]["webhook-id"] == delivery.message_id  # the same message id
    finally:
        failing.close()


def test_it_lists_the_delivery_log_without_secrets(admin, receiver, django_capture_on_commit_callbacks):
    created = _create(admin, receiver.url, ["label.moved"])
    with django_capture_on_commit_callbacks(execute=True):
        services.event_emit(event="label.moved", data={"bundle": "refunds"})  # on commit: enqueue (no worker)
    delivery = Delivery.objects.get()
    services.delivery_attempt(delivery_id=delivery.pk)
    log = admin.get(f"{API}{created['id']}/deliveries/").json()["results"]
    assert log[0]["status"] == "succeeded" and log[0]["attempts"] == 1 and log[0]["response_status"] == 200
    assert created["secret"] not in json.dumps(log)


def test_a_rolled_back_change_sends_nothing(admin, receiver):
    from django.db import transaction

    _create(admin, receiver.url, ["label.moved"])
    with pytest.raises(RuntimeError), transaction.atomic():
        services.event_emit(event="label.moved", data={"bundle": "refunds"})
        raise RuntimeError("the change failed")
    assert not Delivery.objects.exists()


def test_the_retry_sweep_runs_every_five_seconds():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["webhooks-retry-sweep"]
    assert entry["task"] == "webhooks.tasks.webhook_retry_sweep_task" and entry["schedule"] <= 5
    assert services.RETRY_SCHEDULE[0] + entry["schedule"] <= 10


def test_due_deliveries_are_found_by_the_sweep(admin, receiver, django_capture_on_commit_callbacks):
    _create(admin, receiver.url, ["label.moved"])
    with django_capture_on_commit_callbacks(execute=False):  # the enqueue is "lost"
        services.event_emit(event="label.moved", data={"bundle": "refunds"})
    delivery = Delivery.objects.get()
    assert services.deliveries_due() == [delivery.pk]
    services.delivery_attempt(delivery_id=delivery.pk)
    assert services.deliveries_due() == []


MARKER = "PROMPT-MARKER-7f3a"


def test_the_lifecycle_announces_itself_without_content(admin, receiver, ops, agent, bundle):
    from registry.services import label_move, version_publish, version_revoke
    from sessions_app.services import session_end, session_start
    from tests.conftest import content

    _create(
        admin,
        receiver.url,
        ["version.published", "label.moved", "version.draining", "version.drained", "version.revoked"],
    )
    v1 = version_publish(bundle=bundle, content=content(f"One {MARKER}."), message="v1", actor=ops.actor).version
    v2 = version_publish(bundle=bundle, content=content(f"Two {MARKER}."), message="v2", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first")
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    session_end(session=session, actor=agent.actor)
    from registry.lifecycle import version_drain

    assert version_drain(version_id=v1.pk)
    version_revoke(version=v1, actor=ops.actor, reason="bad")
    sent = [(d.event, d.payload["data"]) for d in Delivery.objects.order_by("id")]
    assert [event for event, _ in sent] == [
        "version.published",
        "version.published",
        "label.moved",
        "label.moved",
        "version.draining",
        "version.drained",
        "version.revoked",
    ]
    assert sent[0][1] == {"bundle": "refunds", "version": 1, "content_hash": v1.content_hash, "by": ops.actor.name}
    assert sent[3][1] == {
        "bundle": "refunds",
        "label": "production",
        "from_version": 1,
        "to_version": 2,
        "targets": [{"version": 2, "weight": 100}],
        "rollback": False,
        "release": None,
        "by": ops.actor.name,
        "reason": "ship v2",
    }
    assert sent[5][1] == {"bundle": "refunds", "version": 1, "content_hash": v1.content_hash}
    assert MARKER not in json.dumps([d.payload for d in Delivery.objects.all()])


def test_session_expired_is_opt_in_and_names_the_session(admin, receiver, agent, production):
    from datetime import timedelta

    from django.utils import timezone

    from registry.models import Bundle
    from sessions_app.models import Session
    from sessions_app.services import session_expire_lapsed, session_start

    bundle = Bundle.objects.get(name="refunds")
    first, _ = session_start(bundle=bundle, actor=agent.actor)
    Session.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert session_expire_lapsed() == 1
    assert not Delivery.objects.filter(event="session.expired").exists()  # nobody asked for it
    _create(admin, receiver.url, ["session.expired"])
    second, _ = session_start(bundle=bundle, actor=agent.actor)
    Session.objects.filter(pk=second.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert session_expire_lapsed() == 1
    (delivery,) = Delivery.objects.filter(event="session.expired")
    assert delivery.payload["data"] == {"session": str(second.pk), "bundle": "refunds", "version": 1}
