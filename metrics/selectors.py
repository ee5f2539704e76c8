from typing import Any

from metrics import usage
from metrics.models import VersionUsage
from registry.models import BundleVersion, VersionState
from sessions_app.models import Session


def version_totals(*, version_id: int) -> VersionUsage:
    """The version's rolled-up counts (one row; zeros for a version never used), after adding
    this process's pending counts (other processes add theirs within FLUSH_SECONDS)."""
    usage.flush()
    return VersionUsage.objects.filter(version_id=version_id).first() or VersionUsage(version_id=version_id)


def version_usage(*, version: BundleVersion) -> dict[str, Any]:
    """Sessions started and active, pinned fetches (200 and 304), first and last use: the
    rollup row and the partial index of active sessions, never a scan of the version's history."""
    counted = version_totals(version_id=version.pk)
    active = 0 if version.state == VersionState.REVOKED else Session.objects.active_on(version.pk)
    return {
        "bundle": version.bundle.name,
        "version": version.number,
        "sessions_started": counted.sessions_started,
        "sessions_active": active,
        "fetches": counted.fetches,
        "first_used_at": counted.first_used_at,
        "last_used_at": counted.last_used_at,
    }


def latency_percentile_us(buckets: list[int] | None, fraction: float) -> float | None:
    """The upper bound of the histogram bucket holding the `fraction` quantile (None: empty)."""
    total = sum(buckets or [])
    if not total or buckets is None:
        return None
    rank, seen = fraction * total, 0
    for index, n in enumerate(buckets):
        seen += n
        if n and seen >= rank:
            return usage.bucket_upper_us(index)
    return usage.bucket_upper_us(len(buckets) - 1)
