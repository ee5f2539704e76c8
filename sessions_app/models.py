"""Agent sessions, each pinned at start to exactly one bundle version for its whole life."""

import uuid

from django.db import models
from django.db.models import Case, IntegerField, OuterRef, Q, Subquery, Value, When

from access.models import ApiKey
from core import limits
from registry.models import Bundle, BundleVersion, VersionState


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    ENDED = "ended"
    EXPIRED = "expired"


class SessionQuerySet(models.QuerySet["Session"]):
    def active(self) -> "SessionQuerySet":
        return self.filter(status=SessionStatus.ACTIVE)

    def pinned_to(self, version: BundleVersion | int) -> "SessionQuerySet":
        return self.filter(version=version)

    def active_on(self, version: BundleVersion | int) -> int:
        """Active sessions pinned to one version: a range of the partial index
        session_active_version_idx, O(active sessions of the version), never O(history)."""
        return self.active().pinned_to(version).order_by().count()


class _CountOf(Subquery):
    """`(SELECT count(*) FROM (subquery))`: a correlated count, one probe per outer row."""

    template = "(SELECT count(*) FROM (%(subquery)s) _n)"
    output_field = IntegerField()


def active_sessions_annotation(label: str | None = None) -> Case:
    """What a version row annotates as `active_sessions`: a correlated count over the partial
    index of active sessions (a LEFT JOIN with COUNT FILTER would read every session the
    version ever had). A revoked version shows 0: its sessions still hold `active` until their
    lease runs out, but every call they make gets 410. With `label`, only the sessions started
    through that label (a label's sessions per target, not the version's through any label)."""
    sessions = Session.objects.filter(status=SessionStatus.ACTIVE, version=OuterRef("pk"))
    if label is not None:
        sessions = sessions.filter(label=label)
    return Case(
        When(state=VersionState.REVOKED, then=Value(0)),
        default=_CountOf(sessions.order_by().values("pk")),
        output_field=IntegerField(),
    )


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
            # The prune walks ended and expired sessions oldest first (retention.services).
            models.Index(fields=["ended_at", "id"], condition=~Q(status="active"), name="session_ended_idx"),
        ]

    def __str__(self) -> str:
        return str(self.id)
