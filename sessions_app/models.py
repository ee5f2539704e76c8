"""Agent sessions, each pinned at start to exactly one bundle version for its whole life."""

import uuid

from django.db import models
from django.db.models import Q

from access.models import ApiKey
from core import limits
from registry.models import Bundle, BundleVersion


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    ENDED = "ended"
    EXPIRED = "expired"


class SessionQuerySet(models.QuerySet):
    def active(self) -> "SessionQuerySet":
        return self.filter(status=SessionStatus.ACTIVE)

    def pinned_to(self, version: BundleVersion | int) -> "SessionQuerySet":
        return self.filter(version=version)


class Session(models.Model):
    """A session holds a lease: it is active until ended, or until `expires_at` passes
    without a fetch or heartbeat (then the sweep marks it expired)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="sessions")
    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="sessions")
    label = models.CharField(max_length=limits.LABEL_NAME_MAX, null=True, blank=True)  # noqa: DJ001 (null: pinned by version)
    api_key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, null=True, blank=True, related_name="sessions")
    external_id = models.CharField(max_length=limits.EXTERNAL_ID_MAX, null=True, blank=True)  # noqa: DJ001 (NULLs stay out of the unique constraint)
    # What placed the session in a percentage rollout (e.g. the end user's id); None: its own id.
    routing_key = models.CharField(max_length=limits.EXTERNAL_ID_MAX, null=True, blank=True)  # noqa: DJ001 (absent, not empty)
    status = models.CharField(max_length=8, choices=SessionStatus.choices, default=SessionStatus.ACTIVE)
    ttl_seconds = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # Session-scoped variable values, checked against the pinned version's declarations at
    # start (defaults filled in) and never changed after: they are part of the pinned prefix.
    variables = models.JSONField(default=dict, blank=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "external_id"],
                condition=Q(external_id__isnull=False),
                name="session_external_id_unique_per_key",
            ),
        ]
        indexes = [
            # The drain check ("any active session on this version?") and the sweep both
            # look only at active sessions: partial indexes keep them small.
            models.Index(fields=["version"], condition=Q(status="active"), name="session_active_version_idx"),
            models.Index(fields=["expires_at"], condition=Q(status="active"), name="session_active_expiry_idx"),
        ]

    def __str__(self) -> str:
        return str(self.id)
