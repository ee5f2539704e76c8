"""Webhook endpoints and deliveries: every write here.

Delivery is at least once: an event becomes one Delivery row per subscribed endpoint in the
transaction of the change it reports (so a rolled-back change sends nothing), the first
attempt is enqueued after commit, and a periodic sweep sends whatever is due (retries, and
first attempts whose enqueue was lost while the broker was away). A worker claims a delivery
by moving its next_attempt_at forward, so two workers never send the same attempt, and a
worker that dies mid-attempt leaves it due again after CLAIM_LEASE."""

import base64
import json
import logging
import secrets
import time
import uuid
from datetime import timedelta
from functools import partial
from typing import Any

import httpx
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from standardwebhooks import Webhook

from access.actors import SYSTEM, Actor
from access.models import Role
from access.permissions import require_role
from audit.services import audit_record
from core import enqueue
from core.errors import Conflict, InvalidContent
from metrics import instruments
from webhooks.models import Delivery, DeliveryStatus, Endpoint, Event
from webhooks.urlcheck import UrlNotAllowed, check_url

log = logging.getLogger(__name__)

# Seconds to wait after each failed attempt: the first retry comes within 10 s (5 s plus at
# most one sweep interval), the last about 32 hours after the event, so a receiver that is
# down for a day still gets everything. After the last one the endpoint is switched off.
RETRY_SCHEDULE = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800, 28800)
CLAIM_LEASE = timedelta(seconds=60)
ATTEMPT_TIMEOUT = 10.0
MAX_DESCRIPTION = 1000


def _require_admin(actor: Actor) -> None:
    require_role(actor, Role.ADMIN, "Managing webhooks")


def _valid_events(events: Any) -> list[str]:
    known = set(Event.values)
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise InvalidContent("List the events to receive.", {"events": [f"A non-empty list of: {sorted(known)}."]})
    unknown = sorted(set(events) - known)
    if unknown:
        raise InvalidContent("Unknown events.", {"events": [f"Unknown: {unknown}; known: {sorted(known)}."]})
    return sorted(set(events))


def _valid_url(url: Any) -> str:
    if not isinstance(url, str) or not url or len(url) > 2000:
        raise InvalidContent("A URL is required.", {"url": ["An http(s) URL of at most 2,000 characters."]})
    try:
        return check_url(url)
    except UrlNotAllowed as exc:
        raise InvalidContent("This URL cannot receive webhooks.", {"url": [str(exc)]}) from None


def _valid_description(description: Any) -> str:
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise InvalidContent(
            "Invalid description.", {"description": [f"Text of at most {MAX_DESCRIPTION} characters."]}
        )
    return description


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@transaction.atomic
def endpoint_create(*, url: Any, events: Any, actor: Actor, description: Any = "") -> tuple[Endpoint, str]:
    """Register an endpoint; returns it with its signing secret, which is shown only now."""
    _require_admin(actor)
    secret = new_secret()
    endpoint = Endpoint.objects.create(
        url=_valid_url(url),
        events=_valid_events(events),
        description=_valid_description(description),
        secret=secret,
        created_by=actor.name,
    )
    audit_record(
        actor=actor,
        action="webhook.created",
        target_type="webhook",
        target=str(endpoint.pk),
        data={"events": endpoint.events},
    )
    return endpoint, secret


@transaction.atomic
def endpoint_update(*, endpoint: Endpoint, actor: Actor, changes: dict[str, Any]) -> Endpoint:
    """Change url, events, description or active. Switching an endpoint back on clears the
    reason it was switched off."""
    _require_admin(actor)
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
    fields = []
    if "url" in changes:
        endpoint.url = _valid_url(changes["url"])
        fields.append("url")
    if "events" in changes:
        endpoint.events = _valid_events(changes["events"])
        fields.append("events")
    if "description" in changes:
        endpoint.description = _valid_description(changes["description"])
        fields.append("description")
    if "active" in changes:
        if not isinstance(changes["active"], bool):
            raise InvalidContent("Invalid active flag.", {"active": ["true or false."]})
        endpoint.active = changes["active"]
        if endpoint.active:
            endpoint.disabled_at, endpoint.disabled_reason = None, ""
        fields += ["active", "disabled_at", "disabled_reason"]
    if fields:
        endpoint.save(update_fields=fields)
        audit_record(
            actor=actor,
            action="webhook.updated",
            target_type="webhook",
            target=str(endpoint.pk),
            data={"fields": sorted(set(fields) - {"disabled_at", "disabled_reason"})},
        )
    return endpoint


@transaction.atomic
def endpoint_delete(*, endpoint: Endpoint, actor: Actor) -> None:
    _require_admin(actor)
    audit_record(actor=actor, action="webhook.deleted", target_type="webhook", target=str(endpoint.pk))
    endpoint.delete()


def _enqueue(delivery_id: int) -> None:
    """Send the task by name (no import of tasks here). If the broker is away the delivery
    stays due and the sweep sends it: an event is never lost to a broker outage."""
    # Behind the Redis breaker with short timeouts (core.enqueue): never raises.
    enqueue.send("webhooks.tasks.webhook_deliver_task", what=f"webhook delivery {delivery_id}", delivery_id=delivery_id)


def event_subscribed(event: str) -> bool:
    """Whether any active endpoint wants `event` (lets high-volume emitters skip the work)."""
    return Endpoint.objects.filter(active=True, events__contains=[event]).exists()


def event_emit(*, event: str, data: dict[str, Any]) -> int:
    """Record `event` for every active endpoint subscribed to it; call it inside the
    transaction of the change. `data` must hold ids, names, versions, hashes and states only.
    Returns how many deliveries were queued."""
    assert event in Event.values, event
    endpoints = list(Endpoint.objects.filter(active=True, events__contains=[event]).values_list("pk", flat=True))
    if not endpoints:
        return 0
    now = timezone.now()
    payload = {"type": event, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data}
    created = Delivery.objects.bulk_create(
        Delivery(endpoint_id=pk, event=event, message_id=f"msg_{uuid.uuid4().hex}", payload=payload) for pk in endpoints
    )
    for delivery in created:
        transaction.on_commit(partial(_enqueue, delivery.pk))
    return len(created)


def _claim(delivery_id: int) -> bool:
    now = timezone.now()
    return bool(
        Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .update(next_attempt_at=now + CLAIM_LEASE)
    )


def _post(endpoint: Endpoint, delivery: Delivery) -> tuple[int | None, str, int]:
    """One HTTP attempt: (status or None, error text, latency in ms). Runs outside any
    transaction: a slow receiver must not hold a database row lock."""
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False)
    sent_at = timezone.now()
    headers = {
        "content-type": "application/json",
        "user-agent": "prompt-registry-webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(endpoint.secret).sign(delivery.message_id, sent_at, body),
    }
    started = time.monotonic()
    try:
        check_url(endpoint.url)
        response = httpx.post(endpoint.url, content=body.encode(), headers=headers, timeout=ATTEMPT_TIMEOUT)
        status, error = response.status_code, ""
    except UrlNotAllowed as exc:
        status, error = None, str(exc)
    except httpx.HTTPError as exc:
        status, error = None, f"{type(exc).__name__}: {exc}"[:500]
    return status, error, int((time.monotonic() - started) * 1000)


def delivery_attempt(*, delivery_id: int) -> str | None:
    """Make the next attempt of a delivery if it is due and nobody else is making it; returns
    the status it ends in, or None when there was nothing to do (idempotent under redelivery)."""
    if not _claim(delivery_id):
        return None
    delivery = Delivery.objects.select_related("endpoint").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if not endpoint.active:
        Delivery.objects.filter(pk=delivery_id).update(status=DeliveryStatus.SKIPPED, next_attempt_at=None)
        return DeliveryStatus.SKIPPED
    status, error, latency = _post(endpoint, delivery)
    ok = status is not None and 200 <= status < 300
    instruments.WEBHOOK_DELIVERIES.labels(event=delivery.event, outcome="delivered" if ok else "failed").inc()
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
        now = timezone.now()
        delivery.attempts += 1
        delivery.last_attempt_at, delivery.response_status = now, status
        delivery.latency_ms, delivery.error = latency, error
        if ok:
            delivery.status, delivery.delivered_at, delivery.next_attempt_at = DeliveryStatus.SUCCEEDED, now, None
        elif delivery.attempts <= len(RETRY_SCHEDULE):
            delivery.next_attempt_at = now + timedelta(seconds=RETRY_SCHEDULE[delivery.attempts - 1])
        else:
            delivery.status, delivery.next_attempt_at = DeliveryStatus.FAILED, None
            _switch_off(endpoint_id=endpoint.pk, why=f"delivery {delivery.message_id} failed {delivery.attempts} times")
        delivery.save()
    return delivery.status


def _switch_off(*, endpoint_id: int, why: str) -> None:
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint_id)
    if not endpoint.active:
        return
    endpoint.active, endpoint.disabled_at, endpoint.disabled_reason = False, timezone.now(), why
    endpoint.save(update_fields=["active", "disabled_at", "disabled_reason"])
    audit_record(actor=SYSTEM, action="webhook.disabled", target_type="webhook", target=str(endpoint_id), reason=why)


def deliveries_due(*, limit: int = 500) -> list[int]:
    """Ids of pending deliveries whose attempt is due (the retry sweep's work list)."""
    now = timezone.now()
    return list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by("id")
        .values_list("pk", flat=True)[:limit]
    )


@transaction.atomic
def delivery_redeliver(*, delivery: Delivery, actor: Actor) -> Delivery:
    """Send a delivery again now, with the same webhook-id, and a fresh retry budget."""
    _require_admin(actor)
    delivery = Delivery.objects.select_for_update().select_related("endpoint").get(pk=delivery.pk)
    if not delivery.endpoint.active:
        raise Conflict("The endpoint is switched off; switch it on first (PATCH active=true).")
    delivery.status, delivery.attempts, delivery.next_attempt_at = DeliveryStatus.PENDING, 0, None
    delivery.save(update_fields=["status", "attempts", "next_attempt_at"])
    audit_record(
        actor=actor,
        action="webhook.redelivered",
        target_type="webhook",
        target=str(delivery.endpoint_id),
        data={"message_id": delivery.message_id},
    )
    transaction.on_commit(lambda: _enqueue(delivery.pk))
    return delivery
