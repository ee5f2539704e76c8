from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q

from metrics import usage
from metrics.models import VersionUsage
from registry.models import BundleVersion
from sessions_app.models import SessionStatus


def version_usage(*, version: BundleVersion) -> dict[str, Any]:
    """Sessions started and active, pinned fetches (200 and 304), first and last use."""
    usage.flush()  # this process's pending counts; other processes add theirs within 5 s
    sessions = version.sessions.aggregate(
        started=Count("id"),
        active=Count("id", filter=Q(status=SessionStatus.ACTIVE)),
        first=Min("started_at"),
        last_seen=Max("last_seen_at"),
        last_ended=Max("ended_at"),
    )
    counted = VersionUsage.objects.filter(version=version).first()
    moments: list[datetime] = [
        t
        for t in (sessions["last_seen"], sessions["last_ended"], counted.last_fetch_at if counted else None)
        if t is not None
    ]
    return {
        "bundle": version.bundle.name,
        "version": version.number,
        "sessions_started": sessions["started"],
        "sessions_active": sessions["active"],
        "fetches": counted.fetches if counted else 0,
        "first_used_at": sessions["first"],
        "last_used_at": max(moments) if moments else None,
    }
