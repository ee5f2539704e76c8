"""Webhook endpoints and their delivery log (Standard Webhooks: id, timestamp, HMAC-SHA256 signature)."""

from django.db import models


class Event(models.TextChoices):
    VERSION_PUBLISHED = "version.published"
    LABEL_MOVED = "label.moved"
    VERSION_DRAINING = "version.draining"
    VERSION_DRAINED = "version.drained"
    VERSION_REVOKED = "version.revoked"
    RELEASE_APPLIED = "release.applied"
    # A check of a version's content reported `success` or `failure` (not `pending`).
    CHECK_COMPLETED = "check.completed"
    # Someone other than its author approved a version's content (four eyes).
    APPROVAL_RECORDED = "approval.recorded"
    # A move or release became a change request (required approvals); it was approved and
    # applied; it was rejected or withdrawn.
    CHANGE_REQUESTED = "change.requested"
    CHANGE_APPROVED = "change.approved"
    CHANGE_REJECTED = "change.rejected"
    # A model a version may name enters its retirement window, then 7 days and 1 day before;
    # and the day it retires (modelcatalog.services.retirement_notices_send).
    MODEL_RETIRING = "model.retiring"
    MODEL_RETIRED = "model.retired"
    # A tool signature's last label stopped targeting it; the last session that could call it
    # is gone (registry.lifecycle.tools). Endpoint.tools narrows them to some tools.
    TOOL_DRAINING = "tool.draining"
    TOOL_DRAINED = "tool.drained"
    # An MCP server no longer offers a tool as a live or draining version pinned it (removed, or
    # another schema): names the sessions at risk (registry.mcp_drift).
    TOOL_DRIFT = "tool.drift"
    # A rollout guard acted (held, rolled back, promoted a step, was blocked), with the evidence.
    ROLLOUT_GUARDED = "rollout.guarded"
    # Opt-in: one per lapsed session, so high volume.
    SESSION_EXPIRED = "session.expired"


class Endpoint(models.Model):
    """A URL that receives the events it subscribes to. Its secret signs every delivery; it is
    shown once at creation (or rotation) and never again, and is stored encrypted
    (webhooks.sealing): `secret_sealed` holds it. `secret` is the plaintext column of releases
    before 0003, kept (empty) so that their code still inserts rows during a rolling upgrade;
    a row they wrote is sealed on its next attempt. During a rotation's overlap the previous
    secret signs too (two signatures), until `previous_secret_expires_at`."""

    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    # Tool names: when not empty, the tool events (`tool.*`) reach this endpoint only for these
    # tools, so a backend team subscribes to its own; other events are not filtered.
    tools = models.JSONField(default=list, blank=True, db_default=[])
    description = models.TextField(blank=True, default="")
    active = models.BooleanField(default=True)
    secret = models.CharField(max_length=100, blank=True, default="")
    secret_sealed = models.TextField(blank=True, default="", db_default="")
    previous_secret_sealed = models.TextField(blank=True, default="", db_default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"webhook {self.pk} -> {self.url}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its first attempt or a retry
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # every retry failed
    SKIPPED = "skipped"  # the endpoint was switched off before it could be sent


class Delivery(models.Model):
    """One event for one endpoint; `message_id` is the webhook-id header, the same on every
    attempt, so receivers can drop duplicates. The payload holds ids, names, versions, hashes
    and states: never prompt content or secrets."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    message_id = models.CharField(max_length=40, unique=True)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Sent to the queue and not yet picked up, until then (webhooks.services._queue_due): the
    # sweep does not send it again meanwhile. Null: not queued.
    queued_until = models.DateTimeField(null=True, blank=True)
    # An attempt is in flight until then (its deadline plus a margin): what the per-endpoint
    # concurrency limit counts. Null: none.
    sending_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The retry sweep reads only pending deliveries that are due.
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="delivery_pending_due_idx"
            ),
            # Per endpoint, oldest first: what to queue next, and how many are queued or in flight.
            models.Index(
                fields=["endpoint", "id"], condition=models.Q(status="pending"), name="delivery_pending_endpoint_idx"
            ),
            # The few rows queued or in flight (or whose lease ran out unnoticed): counted per
            # endpoint against its limit without reading its whole backlog.
            models.Index(
                fields=["endpoint"],
                condition=models.Q(status="pending")
                & (models.Q(queued_until__isnull=False) | models.Q(sending_until__isnull=False)),
                name="delivery_busy_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> endpoint {self.endpoint_id} ({self.status})"
