"""Webhook endpoints and deliveries: every write here.

Delivery is at least once: an event becomes one Delivery row per subscribed endpoint in the
transaction of the change it reports (so a rolled-back change sends nothing), due deliveries
are queued after commit, and a periodic sweep queues whatever is due (retries, and deliveries
whose message was lost while the broker was away).

Bounded, so that a slow receiver cannot flood the queue or take every slot (issue 18):
- Queued once: `_queue_due` marks the rows it picks `queued_until` (a lease) in the statement
  that selects them, and picks none that are already queued, so the sweep never sends a
  delivery again while its message waits in the queue.
- Per endpoint, at most WEBHOOK_ENDPOINT_CONCURRENCY deliveries are queued or in flight at once:
  the rest wait in the table, due, and each finished attempt queues that endpoint's next one.
  The queue holds at most endpoints x that limit messages (plus duplicates of lost leases).
- An attempt claims its delivery by moving next_attempt_at forward (two workers never send the
  same attempt; a worker that dies mid-attempt leaves it due again after the claim lease) and
  marks it `sending_until`; the claim is refused while the endpoint has its limit in flight.
- One attempt ends within WEBHOOK_ATTEMPT_DEADLINE seconds of wall-clock time, whatever the
  receiver does (core.transport), and connects to the address that was checked."""

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
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from standardwebhooks import Webhook

from access.actors import SYSTEM, Actor
from access.models import Role
from access.permissions import require_role
from audit.services import audit_record
from core import enqueue, instruments
from core.errors import Conflict, InvalidContent
from core.limits import TOOL_NAME_RE
from core.transport import PinnedTransport
from core.urlcheck import UrlNotAllowed, check_url, resolve
from webhooks.models import Delivery, DeliveryStatus, Endpoint, Event
from webhooks.sealing import reseal, seal, unseal

log = logging.getLogger(__name__)

# Seconds to wait after each failed attempt: the first retry comes within 10 s (5 s plus at
# most one sweep interval), the last about 32 hours after the event, so a receiver that is
# down for a day still gets everything. After the last one the endpoint is switched off.
RETRY_SCHEDULE = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800, 28800)
# Per phase (connect, each read or write), inside the attempt's wall-clock deadline.
ATTEMPT_TIMEOUT = 10.0
# A claimed attempt is given up (due again, and its slot counted free) this long after its
# deadline: a worker that died mid-attempt. Longer than the task's hard time limit.
CLAIM_MARGIN = timedelta(seconds=30)
MAX_DESCRIPTION = 1000
# pg_advisory_xact_lock(namespace, endpoint id): one claim at a time per endpoint, so that two
# workers cannot both see a free slot and both take it.
CLAIM_LOCK_NAMESPACE = 0x77680018


def attempt_deadline() -> float:
    return float(settings.WEBHOOK_ATTEMPT_DEADLINE)


def claim_lease() -> timedelta:
    return timedelta(seconds=attempt_deadline()) + CLAIM_MARGIN


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


# Tool names an endpoint may filter its tool events by.
MAX_TOOLS = 100


def _valid_tools(tools: Any) -> list[str]:
    if (
        not isinstance(tools, list)
        or len(tools) > MAX_TOOLS
        or not all(isinstance(t, str) and TOOL_NAME_RE.fullmatch(t) for t in tools)
    ):
        raise InvalidContent(
            "Invalid tool names.",
            {"tools": [f"A list of at most {MAX_TOOLS} tool names, each matching {TOOL_NAME_RE.pattern}."]},
        )
    return sorted(set(tools))


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


def _valid_active(active: Any) -> bool:
    if not isinstance(active, bool):
        raise InvalidContent("Invalid active flag.", {"active": ["true or false."]})
    return active


@transaction.atomic
def endpoint_create(
    *, url: Any, events: Any, actor: Actor, description: Any = "", active: Any = True, tools: Any = None
) -> tuple[Endpoint, str]:
    """Register an endpoint (switched on unless `active` is false: e.g. to set up a receiver
    first); returns it with its signing secret, which is shown only now. `tools` narrows the
    tool events it receives to those tool names."""
    _require_admin(actor)
    secret = new_secret()
    endpoint = Endpoint.objects.create(
        url=_valid_url(url),
        events=_valid_events(events),
        tools=_valid_tools([] if tools is None else tools),
        description=_valid_description(description),
        active=_valid_active(active),
        secret_sealed=seal(secret),
        created_by=actor.name,
    )
    audit_record(
        actor=actor,
        action="webhook.created",
        target_type="webhook",
        target=str(endpoint.pk),
        data={"events": endpoint.events, "tools": endpoint.tools, "active": endpoint.active},
    )
    return endpoint, secret


MAX_OVERLAP_SECONDS = 7 * 24 * 3600
DEFAULT_OVERLAP_SECONDS = 24 * 3600


@transaction.atomic
def endpoint_rotate_secret(
    *, endpoint: Endpoint, actor: Actor, overlap_seconds: Any = DEFAULT_OVERLAP_SECONDS
) -> tuple[Endpoint, str]:
    """Give the endpoint a new signing secret, shown only now. For `overlap_seconds` (at most 7
    days; 0 ends the old one at once) every delivery carries two signatures, the new secret's
    and the old one's (Standard Webhooks allows several in `webhook-signature`), so the
    receiver can switch to the new secret whenever it likes within that window. Rotating again
    during an overlap retires the older secret at once: at most two are ever valid."""
    _require_admin(actor)
    if (
        not isinstance(overlap_seconds, int)
        or isinstance(overlap_seconds, bool)
        or not 0 <= overlap_seconds <= MAX_OVERLAP_SECONDS
    ):
        raise InvalidContent(
            "Invalid overlap.", {"overlap_seconds": [f"Whole seconds from 0 to {MAX_OVERLAP_SECONDS} (7 days)."]}
        )
    endpoint = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
    current = _current_secret(endpoint)
    secret = new_secret()
    endpoint.secret, endpoint.secret_sealed = "", seal(secret)
    if overlap_seconds:
        endpoint.previous_secret_sealed = seal(current)
        endpoint.previous_secret_expires_at = timezone.now() + timedelta(seconds=overlap_seconds)
    else:
        endpoint.previous_secret_sealed, endpoint.previous_secret_expires_at = "", None
    endpoint.save(update_fields=["secret", "secret_sealed", "previous_secret_sealed", "previous_secret_expires_at"])
    audit_record(
        actor=actor,
        action="webhook.secret_rotated",
        target_type="webhook",
        target=str(endpoint.pk),
        data={"overlap_seconds": overlap_seconds},
    )
    return endpoint, secret


def _current_secret(endpoint: Endpoint) -> str:
    # A row the previous release wrote during a rolling upgrade still has it in plaintext.
    return unseal(endpoint.secret_sealed) if endpoint.secret_sealed else endpoint.secret


def signing_secrets(endpoint: Endpoint, *, now: Any = None) -> list[str]:
    """The secrets a delivery is signed with now: the current one, and during a rotation's
    overlap the previous one."""
    now = now or timezone.now()
    secrets_ = [_current_secret(endpoint)]
    if (
        endpoint.previous_secret_sealed
        and endpoint.previous_secret_expires_at
        and endpoint.previous_secret_expires_at > now
    ):
        secrets_.append(unseal(endpoint.previous_secret_sealed))
    return secrets_


def _seal_plaintext(endpoint: Endpoint) -> None:
    """Seal a secret the previous release stored in plaintext (once; a no-op otherwise)."""
    if endpoint.secret and not endpoint.secret_sealed:
        Endpoint.objects.filter(pk=endpoint.pk, secret=endpoint.secret, secret_sealed="").update(
            secret_sealed=seal(endpoint.secret), secret=""
        )


def secrets_reseal() -> int:
    """Re-encrypt every stored secret under the first of WEBHOOK_SECRET_KEYS (after a new key
    was put first) and seal any plaintext left by the previous release; returns how many rows
    changed. Then the old keys can be removed."""
    changed = 0
    for pk in Endpoint.objects.values_list("pk", flat=True):
        with transaction.atomic():
            endpoint = Endpoint.objects.select_for_update().get(pk=pk)
            if endpoint.secret and not endpoint.secret_sealed:
                endpoint.secret_sealed, endpoint.secret = seal(endpoint.secret), ""
            elif endpoint.secret_sealed:
                endpoint.secret_sealed = reseal(endpoint.secret_sealed)
            else:
                continue
            if endpoint.previous_secret_sealed:
                endpoint.previous_secret_sealed = reseal(endpoint.previous_secret_sealed)
            endpoint.save(update_fields=["secret", "secret_sealed", "previous_secret_sealed"])
            changed += 1
    return changed


@transaction.atomic
def endpoint_update(*, endpoint: Endpoint, actor: Actor, changes: dict[str, Any]) -> Endpoint:
    """Change url, events, tools, description or active. Switching an endpoint back on clears the
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
    if "tools" in changes:
        endpoint.tools = _valid_tools(changes["tools"])
        fields.append("tools")
    if "description" in changes:
        endpoint.description = _valid_description(changes["description"])
        fields.append("description")
    if "active" in changes:
        endpoint.active = _valid_active(changes["active"])
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


# Picks, for each endpoint (or the ones listed), its oldest due deliveries that are not queued,
# as many as its free slots (the limit minus those queued or in flight), and marks them queued
# in the same statement, so two sweeps, or a sweep and a finished attempt, never pick the same
# row twice (SKIP LOCKED) and nothing is queued twice while its lease runs.
_QUEUE_DUE_SQL = """
UPDATE webhooks_delivery AS d SET queued_until = %(until)s
FROM (
    SELECT pick.id FROM webhooks_endpoint AS e
    CROSS JOIN LATERAL (
        SELECT x.id FROM webhooks_delivery AS x
        WHERE x.endpoint_id = e.id AND x.status = 'pending'
          AND (x.next_attempt_at IS NULL OR x.next_attempt_at <= %(now)s)
          AND (x.queued_until IS NULL OR x.queued_until <= %(now)s)
        ORDER BY x.id
        LIMIT GREATEST(0, %(limit)s - (
            SELECT count(*) FROM webhooks_delivery AS y
            WHERE y.endpoint_id = e.id AND y.status = 'pending'
              AND (y.queued_until IS NOT NULL OR y.sending_until IS NOT NULL)
              AND (y.queued_until > %(now)s OR y.sending_until > %(now)s)
        ))
        FOR UPDATE SKIP LOCKED
    ) AS pick
    WHERE {only}
    LIMIT %(cap)s
) AS picked
WHERE d.id = picked.id
RETURNING d.id
"""


def deliveries_queue_due(*, endpoint_ids: list[int] | None = None, cap: int = 500) -> list[int]:
    """Queue what is due (of `endpoint_ids`, or of every endpoint), within each endpoint's
    limit; returns the ids sent. Runs after commit or in a task, never in a request's
    transaction. If the broker is away the deliveries are unmarked again and stay due: the sweep
    sends them once it is back, so an event is never lost to a broker outage."""
    now = timezone.now()
    params: dict[str, Any] = {
        "now": now,
        "until": now + timedelta(seconds=settings.WEBHOOK_QUEUE_LEASE),
        "limit": settings.WEBHOOK_ENDPOINT_CONCURRENCY,
        "cap": cap,
        "ids": endpoint_ids or [],
    }
    only = "e.id = ANY(%(ids)s)" if endpoint_ids is not None else "TRUE"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_QUEUE_DUE_SQL.format(only=only), params)
        picked = sorted(row[0] for row in cursor.fetchall())
    unsent = [delivery_id for delivery_id in picked if not _enqueue(delivery_id)]
    if unsent:
        Delivery.objects.filter(pk__in=unsent).update(queued_until=None)
    return [delivery_id for delivery_id in picked if delivery_id not in set(unsent)]


def _enqueue(delivery_id: int) -> bool:
    """Send the task by name (no import of tasks here)."""
    # Behind the Redis breaker with short timeouts (core.enqueue): never raises.
    return enqueue.send(
        "webhooks.tasks.webhook_deliver_task", what=f"webhook delivery {delivery_id}", delivery_id=delivery_id
    )


def event_subscribed(event: str) -> bool:
    """Whether any active endpoint wants `event` (lets high-volume emitters skip the work)."""
    return Endpoint.objects.filter(active=True, events__contains=[event]).exists()


def event_emit(*, event: str, data: dict[str, Any]) -> int:
    """Record `event` for every active endpoint subscribed to it; call it inside the
    transaction of the change. `data` must hold ids, names, versions, hashes and states only.
    Returns how many deliveries were queued."""
    assert event in Event.values, event
    subscribed = Endpoint.objects.filter(active=True, events__contains=[event])
    tool = data.get("tool")
    if event.startswith("tool.") and isinstance(tool, str):
        # An endpoint that names tools hears only about those (Endpoint.tools).
        subscribed = subscribed.filter(Q(tools=[]) | Q(tools__contains=[tool]))
    endpoints = list(subscribed.values_list("pk", flat=True))
    if not endpoints:
        return 0
    now = timezone.now()
    payload = {"type": event, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data}
    created = Delivery.objects.bulk_create(
        Delivery(endpoint_id=pk, event=event, message_id=f"msg_{uuid.uuid4().hex}", payload=payload) for pk in endpoints
    )
    transaction.on_commit(partial(deliveries_queue_due, endpoint_ids=endpoints))
    return len(created)


class _Deliveries:
    """core.events' subscriber: every event becomes a delivery per subscribed endpoint."""

    def subscribed(self, event: str) -> bool:
        return event_subscribed(event)

    def deliver(self, *, event: str, data: dict[str, object]) -> None:
        event_emit(event=event, data=data)


DELIVERIES = _Deliveries()


def _claim(delivery_id: int) -> tuple[str, int | None]:
    """Take the next attempt of a delivery: ("claimed", endpoint id), ("busy", endpoint id)
    when its endpoint has its limit of attempts in flight (it stays due and is unmarked, so the
    endpoint's next finished attempt or the sweep queues it again), or ("none", None) when it is
    not due (done, or another worker has it: a redelivered message)."""
    with transaction.atomic():
        endpoint_id = (
            Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING)
            .values_list("endpoint_id", flat=True)
            .first()
        )
        if endpoint_id is None:
            return "none", None
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CLAIM_LOCK_NAMESPACE, endpoint_id])
        now = timezone.now()
        due = Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING).filter(
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
        )
        in_flight = Delivery.objects.filter(
            endpoint_id=endpoint_id, status=DeliveryStatus.PENDING, sending_until__gt=now
        ).count()
        if in_flight >= settings.WEBHOOK_ENDPOINT_CONCURRENCY:
            return ("busy" if due.update(queued_until=None) else "none"), endpoint_id
        lease = now + claim_lease()
        if not due.update(next_attempt_at=lease, sending_until=lease, queued_until=None):
            return "none", None
        return "claimed", endpoint_id


def _signature(endpoint: Endpoint, delivery: Delivery, body: str, sent_at: Any) -> str:
    """`v1,<sig>` per valid secret, space-separated (Standard Webhooks: a receiver accepts the
    delivery if any one of them verifies with its secret)."""
    return " ".join(
        Webhook(secret).sign(delivery.message_id, sent_at, body) for secret in signing_secrets(endpoint, now=sent_at)
    )


def _post(endpoint: Endpoint, delivery: Delivery) -> tuple[int | None, str, int]:
    """One HTTP attempt: (status or None, error text, latency in ms), within the attempt's
    wall-clock deadline (resolving included) and to the address checked. Runs outside any
    transaction: a slow receiver must not hold a database row lock. Only the status line and
    headers are waited for: the body is never read."""
    body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False)
    sent_at = timezone.now()
    headers = {
        "content-type": "application/json",
        "user-agent": "prompt-registry-webhooks/1",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": _signature(endpoint, delivery, body, sent_at),
    }
    started = time.monotonic()
    deadline = started + attempt_deadline()
    try:
        resolved = resolve(endpoint.url, timeout=attempt_deadline())
        transport = PinnedTransport(resolved, deadline=deadline)
        with (
            httpx.Client(transport=transport, trust_env=False, timeout=ATTEMPT_TIMEOUT) as client,
            client.stream("POST", endpoint.url, content=body.encode(), headers=headers) as response,
        ):
            status, error = response.status_code, ""
    except UrlNotAllowed as exc:
        status, error = None, str(exc)
    except httpx.HTTPError as exc:
        status, error = None, f"{type(exc).__name__}: {exc}"[:500]
        if isinstance(exc, httpx.TimeoutException) and time.monotonic() >= deadline - 0.05:
            status, error = None, f"The attempt's deadline ({attempt_deadline():g} s) passed ({error})."[:500]
    return status, error, int((time.monotonic() - started) * 1000)


def delivery_attempt(*, delivery_id: int) -> str | None:
    """Make the next attempt of a delivery if it is due, nobody else is making it and its
    endpoint has a free slot; returns the status it ends in, "busy" when the endpoint had no
    free slot, or None when there was nothing to do (idempotent under redelivery). Afterwards
    queues the endpoint's next due delivery into the slot it frees."""
    claimed, endpoint_id = _claim(delivery_id)
    if claimed != "claimed" or endpoint_id is None:
        return "busy" if claimed == "busy" else None
    try:
        return _attempt(delivery_id)
    finally:
        deliveries_queue_due(endpoint_ids=[endpoint_id])


def _attempt(delivery_id: int) -> str:
    delivery = Delivery.objects.select_related("endpoint").get(pk=delivery_id)
    endpoint = delivery.endpoint
    _seal_plaintext(endpoint)
    if not endpoint.active:
        Delivery.objects.filter(pk=delivery_id).update(
            status=DeliveryStatus.SKIPPED, next_attempt_at=None, sending_until=None
        )
        return DeliveryStatus.SKIPPED
    status, error, latency = _post(endpoint, delivery)
    ok = status is not None and 200 <= status < 300
    instruments.webhook_attempt(event=delivery.event, ok=ok)
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
        now = timezone.now()
        delivery.attempts += 1
        delivery.last_attempt_at, delivery.response_status = now, status
        delivery.latency_ms, delivery.error = latency, error
        delivery.sending_until = None
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
    """Ids of pending deliveries whose attempt is due and that are not queued (what the retry
    sweep will queue, within each endpoint's limit)."""
    now = timezone.now()
    return list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .filter(Q(queued_until__isnull=True) | Q(queued_until__lte=now))
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
    delivery.queued_until = None
    delivery.save(update_fields=["status", "attempts", "next_attempt_at", "queued_until"])
    audit_record(
        actor=actor,
        action="webhook.redelivered",
        target_type="webhook",
        target=str(delivery.endpoint_id),
        data={"message_id": delivery.message_id},
    )
    transaction.on_commit(partial(deliveries_queue_due, endpoint_ids=[delivery.endpoint_id]))
    return delivery
