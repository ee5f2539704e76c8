"""Agent sessions, each pinned at start to exactly one bundle version for its whole life."""

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, Expression, IntegerField, OuterRef, Q, Subquery, Sum, Value, When

from access.models import ApiKey
from core import limits
from core.ids import uuid7
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
        """Active sessions pinned to one version, as active_count() shows them: exact up to
        SESSION_COUNT_EXACT_LIMIT (a range of the partial index session_active_version_id_idx),
        above it the last sweep's tally."""
        version_id = version.pk if isinstance(version, BundleVersion) else version
        query = BundleVersion.objects.filter(pk=version_id).annotate(n=active_count(version=version_id))
        return query.values_list("n", flat=True).first() or 0


def exact_count_limit() -> int:
    """Up to this many active sessions a version (or label target) shows an exact count; above it,
    the last sweep's tally (settings.SESSION_COUNT_EXACT_LIMIT, docs/performance.md)."""
    return int(settings.SESSION_COUNT_EXACT_LIMIT)


class _ActiveCount(Expression):
    """Active sessions of the outer version row, bounded: count at most `limit + 1` entries of the
    partial index; when there are more, show the last sweep's tally (ActiveTally), never less than
    what was just counted. Exact while small (what a drain, a preview or a test looks at), and a
    bounded amount of work however many sessions a busy version holds: the count of 80,000 active
    sessions scattered over a large heap cost a heap fetch each on every version GET, preview and
    dashboard poll (issue 20's bench)."""

    output_field = IntegerField()

    def __init__(self, sessions: Any, tally: Any, limit: int) -> None:
        super().__init__()
        self.sessions, self.tally, self.limit = sessions, tally, limit

    def get_source_expressions(self) -> list[Any]:
        return [self.sessions, self.tally]

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.sessions, self.tally = exprs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        sessions_sql, sessions_params = compiler.compile(self.sessions)
        tally_sql, tally_params = compiler.compile(self.tally)
        limit = int(self.limit)
        sql = (
            f"(SELECT CASE WHEN _n.n > {limit} THEN GREATEST(_n.n, COALESCE({tally_sql}, 0)) ELSE _n.n END"
            f" FROM (SELECT count(*) AS n FROM {sessions_sql} _b) _n)"
        )
        return sql, (*tally_params, *sessions_params)  # in the order they appear


def active_count(label: str | None = None, *, version: Any = None) -> _ActiveCount:
    """The bounded count (_ActiveCount) of the active sessions of `version` (default: the outer
    version row, OuterRef("pk")); with `label`, only those started through that label."""
    version = OuterRef("pk") if version is None else version
    limit = exact_count_limit()
    sessions = Session.objects.filter(status=SessionStatus.ACTIVE, version=version)
    tally = ActiveTally.objects.filter(version=version)
    if label is not None:
        sessions, tally = sessions.filter(label=label), tally.filter(label=label)
    total = tally.order_by().values("version").annotate(total=Sum("active")).values("total")
    # Ordered by id: an index scan of (version, id) that stops after limit + 1 (a bitmap scan
    # would read every entry of the version first).
    return _ActiveCount(Subquery(sessions.order_by("pk").values("pk")[: limit + 1]), Subquery(total), limit)


def active_sessions_annotation(label: str | None = None) -> Case:
    """What a version row annotates as `active_sessions`: the bounded count over the partial
    index of active sessions (a LEFT JOIN with COUNT FILTER would read every session the
    version ever had). A revoked version shows 0: its sessions still hold `active` until their
    lease runs out, but every call they make gets 410. With `label`, only the sessions started
    through that label (a label's sessions per target, not the version's through any label)."""
    return Case(
        When(state=VersionState.REVOKED, then=Value(0)),
        default=active_count(label),
        output_field=IntegerField(),
    )


class Session(models.Model):
    """A session holds a lease: it is active until ended, or until `expires_at` passes
    without a fetch or heartbeat (then the sweep marks it expired)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)  # time-ordered: core/ids.py
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
            # (version, id): the bounded count walks a version's active sessions in id order and
            # stops early (active_count; migration 0006 says why not (version) alone).
            models.Index(fields=["version", "id"], condition=Q(status="active"), name="session_active_version_id_idx"),
            models.Index(fields=["expires_at"], condition=Q(status="active"), name="session_active_expiry_idx"),
            # The prune walks ended and expired sessions oldest first (retention.services).
            models.Index(fields=["ended_at", "id"], condition=~Q(status="active"), name="session_ended_idx"),
        ]

    def __str__(self) -> str:
        return str(self.id)


class ActiveTally(models.Model):
    """Active sessions per version and label as the last sweep counted them (sessions_tally):
    what a count above SESSION_COUNT_EXACT_LIMIT shows. Replaced whole on each sweep; a version
    with no active session has no row."""

    version = models.ForeignKey(BundleVersion, on_delete=models.CASCADE, related_name="+")
    label = models.CharField(max_length=limits.LABEL_NAME_MAX, null=True, blank=True)  # noqa: DJ001 (as Session.label)
    active = models.PositiveIntegerField()
    counted_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.version_id}/{self.label or '-'}: {self.active}"


class SweepLease(models.Model):
    """Who runs the periodic sweep now, until when (sessions_app.sweep.sessions_sweep). A row,
    not a session-level advisory lock: behind PgBouncer in transaction mode the lock and its
    unlock could reach different server connections (the lock then leaked for good, and every
    later sweep was skipped), and a lease row works whatever pool sits in between. Times are
    the database's now(), so no node's clock decides when a lease has run out."""

    name = models.CharField(max_length=32, primary_key=True)
    holder = models.CharField(max_length=64)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder} until {self.expires_at}"
