"""The periodic sweep (sessions_app.tasks.sessions_sweep_task): lapsed sessions expired, draining
versions drained, tool signatures settled, the active tallies counted, under a lease row so that
two beats never run it at once."""

import uuid

from django.db import connection, transaction

from registry import lifecycle
from registry.models import BundleVersion, VersionState
from sessions_app.models import SweepLease
from sessions_app.services import session_expire_lapsed

# The sweep's lease (models.SweepLease): longer than any sweep runs, so that a beat killed
# mid-sweep blocks the next ones for at most this long.
SWEEP_LEASE = "sessions_sweep"
SWEEP_LEASE_SECONDS = 600
# Taken when there is no row, or the row's lease ran out: one statement, so two beats that
# race for it cannot both win (the loser's INSERT conflicts and its UPDATE's WHERE is false).
_SWEEP_TAKE_SQL = """
INSERT INTO sessions_app_sweeplease (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, now() + %(seconds)s * interval '1 second')
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE sessions_app_sweeplease.expires_at <= now()
RETURNING holder
"""


def sweep_lease_take(*, holder: str, seconds: int = SWEEP_LEASE_SECONDS) -> bool:
    """Whether `holder` now holds the sweep's lease (a committed row, the database's clock)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_SWEEP_TAKE_SQL, {"name": SWEEP_LEASE, "holder": holder, "seconds": seconds})
        return cursor.fetchone() is not None


def sweep_lease_release(*, holder: str) -> None:
    SweepLease.objects.filter(name=SWEEP_LEASE, holder=holder).delete()


def sessions_sweep() -> dict[str, int] | None:
    """The periodic backstop: expire lapsed sessions, then drain every draining version that
    has nothing pinned. Holds the sweep's lease row for its whole run so that two beats (or a
    slow sweep overlapping the next) never run at once; returns None when another holds it.
    Each step is idempotent anyway: the lease saves work, correctness does not depend on it.
    (A session-level advisory lock did this until issue 36: behind PgBouncer in transaction
    mode its unlock could reach another server connection, and the lock never let go.)"""
    holder = uuid.uuid4().hex
    if not sweep_lease_take(holder=holder):
        return None
    try:
        expired = session_expire_lapsed()
        draining = list(BundleVersion.objects.filter(state=VersionState.DRAINING).values_list("pk", flat=True))
        # Each drain in its own transaction: one busy version must not hold the others' locks.
        drained = sum(lifecycle.version_drain(version_id=version_id) for version_id in draining)
        # The backstop of the settles each version transition asks for after its commit.
        lifecycle.tool_signatures_settle_open()
        sessions_tally()
    finally:
        sweep_lease_release(holder=holder)
    return {"expired": expired, "drained": drained}


@transaction.atomic
def sessions_tally() -> int:
    """Count every version's active sessions per label, once, for the counts above
    SESSION_COUNT_EXACT_LIMIT (models.active_count): one pass over the partial index of active
    sessions per sweep instead of one per version GET, preview and dashboard poll. The table is
    replaced in one transaction, so a reader sees the previous tally or this one, never half.
    Returns the number of (version, label) rows written."""
    # One INSERT ... SELECT: the groups never travel to Python and back.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM sessions_app_activetally")
        cursor.execute(
            "INSERT INTO sessions_app_activetally (version_id, label, active, counted_at)"
            " SELECT version_id, label, count(*), now() FROM sessions_app_session WHERE status = 'active'"
            " GROUP BY version_id, label"
        )
        return int(cursor.rowcount)
