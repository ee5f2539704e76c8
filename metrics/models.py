from django.contrib.postgres.fields import ArrayField
from django.db import models

from registry.models import BundleVersion


class _Counts(models.Model):
    """The counters metrics.usage adds up in each process and upserts in batches, so the hot
    path never writes a row per call. Every new column has a database default (or is
    nullable): the previous release's INSERT of (version_id, fetches, last_fetch_at) still works."""

    fetches = models.BigIntegerField(default=0, db_default=0)
    sessions_started = models.BigIntegerField(default=0, db_default=0)
    turns = models.BigIntegerField(default=0, db_default=0)
    routed_sessions = models.BigIntegerField(default=0, db_default=0)  # sessions with a routed turn
    reported_turns = models.BigIntegerField(default=0, db_default=0)
    invocations = models.BigIntegerField(default=0, db_default=0)
    invocation_hits = models.BigIntegerField(default=0, db_default=0)
    routed_loads = models.BigIntegerField(default=0, db_default=0)
    invalid_loads = models.BigIntegerField(default=0, db_default=0)
    # Reported turns that invoked a skill, and those that invoked the wrong one (metrics.usage).
    decided_turns = models.BigIntegerField(default=0, db_default=0)
    decision_errors = models.BigIntegerField(default=0, db_default=0)
    first_used_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_fetch_at = models.DateTimeField(null=True, blank=True)
    # Routing latency histogram (metrics.usage.LATENCY_BUCKETS); null until a turn is routed.
    latency_buckets = ArrayField(models.BigIntegerField(), null=True, blank=True)

    class Meta:
        abstract = True


class VersionUsage(_Counts):
    """A version's lifetime totals: one row per version, never pruned (like the version)."""

    version = models.OneToOneField(BundleVersion, on_delete=models.PROTECT, primary_key=True, related_name="usage")

    def __str__(self) -> str:
        return f"usage of version {self.version_id}"


class VersionDay(_Counts):
    """The same counts per version and UTC day, pruned after RETENTION_USAGE_ROLLUP_DAYS."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "day"], name="versionday_unique")]
        indexes = [models.Index(fields=["day"], name="versionday_day_idx")]

    def __str__(self) -> str:
        return f"usage of version {self.version_id} on {self.day}"
