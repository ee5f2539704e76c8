"""Webhooks end to end: a real Celery worker delivers to a real receiver on 127.0.0.1, which
verifies the signature with the standardwebhooks package; a 500 is retried within 10 s."""

import time

import pytest
from standardwebhooks import Webhook

from access.models import Role
from tests.conftest import content, make_api
from tests.sessions_app.test_worker import worker  # noqa: F401 (fixture)
from tests.webhooks.test_webhooks import Receiver
from webhooks.models import Delivery
from webhooks.tasks import webhook_retry_sweep_task

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_a_worker_delivers_signed_events_and_retries_a_failure(worker):  # noqa: F811
    admin, ops = make_api(Role.ADMIN, "wh-admin"), make_api(Role.OPS, "wh-ops")
    receiver = Receiver([500, 200])
    try:
        secret = admin.post("/api/v1/webhooks/", {"url": receiver.url, "events": ["version.published"]}).json()[
            "secret"
        ]
        assert ops.post("/api/v1/bundles/", {"name": "hooked"}).status_code == 201
        published = ops.post("/api/v1/bundles/hooked/versions/", {"content": content(), "message": "v1"})
        assert published.status_code == 201
        assert _wait(lambda: len(receiver.requests) >= 1, 10), "the first attempt never arrived"
        first = time.monotonic()
        # What beat does every 5 s: send what is due (the retry is due 5 s after the 500).
        assert _wait(lambda: (webhook_retry_sweep_task.delay(), time.sleep(1))[1] or len(receiver.requests) >= 2, 15)
        assert time.monotonic() - first < 10
        for headers, body in receiver.requests:
            payload = Webhook(secret).verify(body, headers)
            assert payload["type"] == "version.published" and payload["data"]["bundle"] == "hooked"
        assert receiver.requests[0][0]["webhook-id"] == receiver.requests[1][0]["webhook-id"]
        assert _wait(lambda: Delivery.objects.get().status == "succeeded", 5)
        delivery = Delivery.objects.get()
        assert (delivery.attempts, delivery.response_status) == (2, 200)
    finally:
        receiver.close()
