"""Webhook secrets: encrypted at rest (Fernet under WEBHOOK_SECRET_KEYS, or a key derived from
DJANGO_SECRET_KEY), sealed by migration 0003 (and unsealed by going back), rotatable with an
overlap during which deliveries carry both signatures (Standard Webhooks), and endpoints that
can be registered switched off. Real PostgreSQL, a real receiver verifying with the
`standardwebhooks` package."""

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from access.models import Role
from audit.models import AuditEvent
from tests.conftest import make_api
from tests.webhooks.test_webhooks import API, Receiver
from webhooks import sealing, services
from webhooks.models import Delivery, DeliveryStatus, Endpoint

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin(db):
    return make_api(Role.ADMIN)


@pytest.fixture
def receiver():
    r = Receiver([])
    yield r
    r.close()


def _deliver_one(event_data: dict | None = None) -> None:
    services.event_emit(event="label.moved", data=event_data or {"bundle": "b"})
    delivery = Delivery.objects.order_by("-id").first()
    assert delivery is not None
    assert services.delivery_attempt(delivery_id=delivery.pk) == DeliveryStatus.SUCCEEDED


def _row(endpoint_id: int) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM webhooks_endpoint WHERE id = %s", [endpoint_id])
        return cursor.fetchone()


def test_it_registers_an_endpoint_switched_off_when_asked(admin, receiver):
    """Before: `active` was refused on create (400), though PATCH and the answer have it."""
    response = admin.post(API, {"url": receiver.url, "events": ["label.moved"], "active": False})
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["active"] is False and created["secret"].startswith("whsec_")
    assert services.event_emit(event="label.moved", data={"bundle": "b"}) == 0  # switched off: nothing queued
    on = admin.post(API, {"url": receiver.url, "events": ["label.moved"], "active": True}).json()
    assert on["active"] is True
    bad = admin.post(API, {"url": receiver.url, "events": ["label.moved"], "active": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "validation_error"


def test_the_secret_is_stored_encrypted(admin, receiver, settings):
    created = admin.post(API, {"url": receiver.url, "events": ["label.moved"]}).json()
    secret = created["secret"]
    raw = secret.removeprefix("whsec_")
    row = _row(created["id"])
    assert not any(isinstance(value, str) and (secret in value or raw in value) for value in row), row
    endpoint = Endpoint.objects.get(pk=created["id"])
    assert endpoint.secret == "" and endpoint.secret_sealed.startswith("gAAAA")  # a Fernet token
    # Signed with the real secret all the same.
    _deliver_one()
    ((headers, body),) = receiver.requests
    Webhook(secret).verify(body, headers)
    # Another key cannot open it.
    settings.WEBHOOK_SECRET_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(ImproperlyConfigured):
        sealing.unseal(endpoint.secret_sealed)


def test_the_encryption_key_rotates_with_reseal(admin, receiver, settings):
    created = admin.post(API, {"url": receiver.url, "events": ["label.moved"]}).json()
    old_key = sealing.derived_key(settings.SECRET_KEY)
    new_key = Fernet.generate_key().decode()
    settings.WEBHOOK_SECRET_KEYS = [new_key, old_key]  # new first: encrypts; old: still decrypts
    assert services.secrets_reseal() == 1
    sealed = Endpoint.objects.get(pk=created["id"]).secret_sealed
    assert Fernet(new_key.encode()).decrypt(sealed.encode()).decode() == created["secret"]
    settings.WEBHOOK_SECRET_KEYS = [new_key]  # the old key dropped
    _deliver_one()
    ((headers, body),) = receiver.requests
    Webhook(created["secret"]).verify(body, headers)


def test_rotation_signs_with_both_secrets_during_the_overlap(admin, receiver):
    created = admin.post(API, {"url": receiver.url, "events": ["label.moved"]}).json()
    old = created["secret"]
    path = f"{API}{created['id']}/rotate-secret/"
    rotated = admin.post(path, {"overlap_seconds": 3600})
    assert rotated.status_code == 200, rotated.json()
    new = rotated.json()["secret"]
    assert new != old and new.startswith("whsec_")
    assert rotated.json()["previous_secret_expires_at"] is not None
    assert new not in str(admin.get(f"{API}{created['id']}/").json())  # shown once
    assert AuditEvent.objects.filter(action="webhook.secret_rotated", target=str(created["id"])).exists()

    _deliver_one()
    headers, body = receiver.requests[-1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(body, headers)  # a receiver that has not switched yet
    Webhook(new).verify(body, headers)  # one that has

    # The overlap ends: only the new secret signs.
    Endpoint.objects.filter(pk=created["id"]).update(previous_secret_expires_at=timezone.now() - timedelta(seconds=1))
    _deliver_one({"bundle": "c"})
    headers, body = receiver.requests[-1]
    assert len(headers["webhook-signature"].split(" ")) == 1
    Webhook(new).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, headers)

    # Rotating with no overlap retires the current secret at once.
    newest = admin.post(path, {"overlap_seconds": 0}).json()["secret"]
    _deliver_one({"bundle": "d"})
    headers, body = receiver.requests[-1]
    Webhook(newest).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(body, headers)


@pytest.mark.parametrize("overlap", [-1, 7 * 24 * 3600 + 1, "1h", 1.5, True, None])
def test_rotation_refuses_a_bad_overlap_in_the_error_shape(admin, receiver, overlap):
    created = admin.post(API, {"url": receiver.url, "events": ["label.moved"]}).json()
    response = admin.post(f"{API}{created['id']}/rotate-secret/", {"overlap_seconds": overlap})
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert admin.post(f"{API}999999/rotate-secret/", {}).status_code == 404


def test_a_plaintext_secret_from_the_previous_release_is_sealed_on_its_next_attempt(admin, receiver):
    """During a rolling upgrade the previous release inserts rows with a plaintext `secret`
    and no sealed one (it does not know the column: the database default fills it)."""
    secret = services.new_secret()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO webhooks_endpoint (url, events, description, active, secret, created_at, created_by, "
            "disabled_reason) VALUES (%s, '[\"label.moved\"]', '', true, %s, now(), 'old release', '') RETURNING id",
            [receiver.url, secret],
        )
        (endpoint_id,) = cursor.fetchone()
    _deliver_one()
    ((headers, body),) = receiver.requests
    Webhook(secret).verify(body, headers)
    endpoint = Endpoint.objects.get(pk=endpoint_id)
    assert endpoint.secret == "" and sealing.unseal(endpoint.secret_sealed) == secret


def test_the_migration_seals_existing_secrets_and_going_back_unseals_them(admin, receiver):
    created = admin.post(API, {"url": receiver.url, "events": ["label.moved"]}).json()
    secret = created["secret"]
    executor = MigrationExecutor(connection)
    executor.migrate([("webhooks", "0002_delivery_queue_markers")])
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT secret FROM webhooks_endpoint WHERE id = %s", [created["id"]])
            assert cursor.fetchone() == (secret,)  # back in plaintext, for the previous release
            cursor.execute(
                "INSERT INTO webhooks_endpoint (url, events, description, active, secret, created_at, created_by, "
                "disabled_reason) VALUES (%s, '[]', '', true, 'whsec_b2xk', now(), 'old', '') RETURNING id",
                [receiver.url],
            )
            (old_id,) = cursor.fetchone()
    finally:
        # Forward to the latest webhooks migration (0003 seals), so the model's columns all exist.
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes("webhooks"))
    for endpoint_id, plaintext in [(created["id"], secret), (old_id, "whsec_b2xk")]:
        row = _row(endpoint_id)
        assert not any(isinstance(value, str) and plaintext in value for value in row), row
        assert sealing.unseal(Endpoint.objects.get(pk=endpoint_id).secret_sealed) == plaintext
