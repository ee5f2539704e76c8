"""Retention: delete what is older than its retention (config/settings.py RETENTION_*), in small
batches, each its own short transaction, timed (the time of a batch bounds how long its row
locks are held; the batch size adapts so that a batch stays well under 100 ms).

What goes, oldest first:

- skill turns, L3 cards and file reads (with the change notices they record) of sessions that
  ended or expired more than RETENTION_TURNS_DAYS / RETENTION_FILE_READS_DAYS ago (a child row
  never outlives its session: a longer setting is capped at RETENTION_SESSIONS_DAYS);
- sessions that ended or expired more than RETENTION_SESSIONS_DAYS ago (an active session,
  however old, is never touched: every statement selects `status <> 'active'` rows, locked);
- with each session, its raw evidence (its outcome and scores: evidence_sessionoutcome,
  evidence_score); the evidence rollups (evidence_evidenceday, evidence_scoreday) are kept;
- finished webhook deliveries (not pending) older than RETENTION_DELIVERIES_DAYS;
- per-day usage rollups (metrics_versionday) older than RETENTION_USAGE_ROLLUP_DAYS;
- audit events older than RETENTION_AUDIT_DAYS, the one delete the audit trigger allows
  (audit migration 0004: a transaction-local setting names the cutoff, and the trigger itself
  refuses a cutoff less than 30 days old and any row younger than the cutoff).

Versions, labels, their history and each version's lifetime counts (metrics_versionusage)
are never pruned, so a version's usage and routing metrics stay right after its sessions go."""

import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from access.actors import SYSTEM
from audit.services import audit_record

logger = logging.getLogger(__name__)

# The trigger's own floor (audit migration 0004): no retention below it is accepted.
AUDIT_MIN_DAYS = 30
# A batch's target time: grow the batch below the low mark, halve it above the high one.
BATCH_LOW_MS, BATCH_HIGH_MS = 20.0, 50.0
BATCH_MIN, BATCH_MAX = 50, 5000


@dataclass
class TableResult:
    table: str
    before: datetime
    rows: int = 0
    batch_ms: list[float] = field(default_factory=list)

    def line(self) -> str:
        if not self.batch_ms:
            return f"{self.table:<26} {self.rows:>10} rows older than {self.before:%Y-%m-%d %H:%M} UTC"
        return (
            f"{self.table:<26} {self.rows:>10} rows older than {self.before:%Y-%m-%d %H:%M} UTC in"
            f" {len(self.batch_ms)} batches; per batch median {statistics.median(self.batch_ms):.1f} ms,"
            f" max {max(self.batch_ms):.1f} ms"
        )


@dataclass(frozen=True)
class Cutoffs:
    sessions: datetime
    turns: datetime
    file_reads: datetime
    deliveries: datetime
    usage_rollups: datetime
    audit: datetime


def cutoffs(*, now: datetime | None = None, older_than: timedelta | None = None) -> Cutoffs:
    """The moment before which each kind of row goes: its RETENTION_* setting, or `older_than`
    for all of them. The audit log's cutoff is never later than RETENTION_AUDIT_DAYS ago
    (--older-than cannot shorten it)."""
    now = now or timezone.now()

    def before(days: int) -> datetime:
        return now - (older_than if older_than is not None else timedelta(days=days))

    sessions = before(settings.RETENTION_SESSIONS_DAYS)
    audit_days = max(settings.RETENTION_AUDIT_DAYS, AUDIT_MIN_DAYS)
    audit = now - max(timedelta(days=audit_days), older_than or timedelta(0))
    return Cutoffs(
        sessions=sessions,
        # A child row never outlives its session: its cutoff is at least the session's.
        turns=max(before(settings.RETENTION_TURNS_DAYS), sessions),
        file_reads=max(before(settings.RETENTION_FILE_READS_DAYS), sessions),
        deliveries=before(settings.RETENTION_DELIVERIES_DAYS),
        usage_rollups=before(settings.RETENTION_USAGE_ROLLUP_DAYS),
        audit=audit,
    )


# --- what each table deletes, one batch at a time (each returns the rows deleted) -----------

# Sessions that ended (or expired: the sweep sets ended_at too) before the cutoff, walked in
# (ended_at, id) order over the partial index session_ended_idx; `after` is where the previous
# batch stopped. Locked FOR UPDATE: nothing can end or renew a row that is not active anyway,
# and a concurrent prune skips what this one holds.
_ENDED_SESSIONS = """
    SELECT id, ended_at FROM sessions_app_session
    WHERE status <> 'active' AND ended_at < %(before)s AND (ended_at, id) > (%(after_at)s, %(after_id)s)
    ORDER BY ended_at, id LIMIT %(batch)s FOR UPDATE SKIP LOCKED
"""

_CHILDREN_SQL = {
    "skills_skillturn": "DELETE FROM skills_skillturn WHERE session_id = ANY(%(ids)s::uuid[])",
    "skills_sessionskill": "DELETE FROM skills_sessionskill WHERE session_id = ANY(%(ids)s::uuid[])",
    "knowledge_fileread": "DELETE FROM knowledge_fileread WHERE session_id = ANY(%(ids)s::uuid[])",
}

_SESSIONS_SQL = """
WITH doomed AS (
    SELECT id FROM sessions_app_session
    WHERE status <> 'active' AND ended_at < %(before)s
    ORDER BY ended_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
), turns AS (
    DELETE FROM skills_skillturn WHERE session_id IN (SELECT id FROM doomed)
), cards AS (
    DELETE FROM skills_sessionskill WHERE session_id IN (SELECT id FROM doomed)
), reads AS (
    DELETE FROM knowledge_fileread WHERE session_id IN (SELECT id FROM doomed)
), outcomes AS (
    DELETE FROM evidence_sessionoutcome WHERE session_id IN (SELECT id FROM doomed)
), scores AS (
    DELETE FROM evidence_score WHERE session_id IN (SELECT id FROM doomed)
)
DELETE FROM sessions_app_session WHERE id IN (SELECT id FROM doomed)
"""

_DELIVERIES_SQL = """
DELETE FROM webhooks_delivery WHERE id = ANY(ARRAY(
    SELECT id FROM webhooks_delivery WHERE status <> 'pending' AND created_at < %(before)s
      AND id < %(bound)s
    ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED))
"""
# Deliveries' ids grow with created_at: the first id at or after the cutoff bounds the walk, so
# the last batch stops there instead of reading every newer delivery (no index on created_at).
_DELIVERIES_BOUND = """
SELECT coalesce((SELECT id FROM webhooks_delivery WHERE created_at >= %(before)s ORDER BY id LIMIT 1),
                (SELECT max(id) + 1 FROM webhooks_delivery), 0)
"""

_ROLLUPS_SQL = """
DELETE FROM metrics_versionday WHERE id = ANY(ARRAY(
    SELECT id FROM metrics_versionday WHERE day < %(before)s::date ORDER BY day LIMIT %(batch)s))
"""

_AUDIT_SQL = """
DELETE FROM audit_auditevent WHERE id = ANY(ARRAY(
    SELECT id FROM audit_auditevent WHERE at < %(before)s ORDER BY at LIMIT %(batch)s))
"""

_COUNT_SQL = {
    "skills_skillturn": """SELECT count(*) FROM skills_skillturn t JOIN sessions_app_session s
        ON s.id = t.session_id WHERE s.status <> 'active' AND s.ended_at < %(before)s""",
    "skills_sessionskill": """SELECT count(*) FROM skills_sessionskill t JOIN sessions_app_session s
        ON s.id = t.session_id WHERE s.status <> 'active' AND s.ended_at < %(before)s""",
    "knowledge_fileread": """SELECT count(*) FROM knowledge_fileread t JOIN sessions_app_session s
        ON s.id = t.session_id WHERE s.status <> 'active' AND s.ended_at < %(before)s""",
    "sessions_app_session": """SELECT count(*) FROM sessions_app_session
        WHERE status <> 'active' AND ended_at < %(before)s""",
    "webhooks_delivery": """SELECT count(*) FROM webhooks_delivery
        WHERE status <> 'pending' AND created_at < %(before)s""",
    "metrics_versionday": "SELECT count(*) FROM metrics_versionday WHERE day < %(before)s::date",
    "audit_auditevent": "SELECT count(*) FROM audit_auditevent WHERE at < %(before)s",
}


def _batches(run_one: Callable[[int], int], result: TableResult, *, batch: int) -> None:
    """Run batches (each in its own transaction) until one deletes nothing, timing each and
    adapting its size to stay between BATCH_LOW_MS and BATCH_HIGH_MS."""
    while True:
        started = time.perf_counter()
        with transaction.atomic():
            deleted = run_one(batch)
        elapsed = (time.perf_counter() - started) * 1000
        if deleted == 0:
            return
        result.rows += deleted
        result.batch_ms.append(elapsed)
        if elapsed > BATCH_HIGH_MS:
            batch = max(BATCH_MIN, batch // 2)
        elif elapsed < BATCH_LOW_MS:
            batch = min(BATCH_MAX, batch * 2)


def _execute(sql: str, params: dict[str, Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _count(table: str, before: datetime) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL[table], {"before": before})
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _plan(c: Cutoffs) -> Iterator[tuple[str, datetime]]:
    yield "skills_skillturn", c.turns
    yield "skills_sessionskill", c.turns
    yield "knowledge_fileread", c.file_reads
    yield "sessions_app_session", c.sessions
    yield "webhooks_delivery", c.deliveries
    yield "metrics_versionday", c.usage_rollups
    yield "audit_auditevent", c.audit


def prune(
    *,
    dry_run: bool = False,
    older_than: timedelta | None = None,
    batch: int | None = None,
    now: datetime | None = None,
) -> list[TableResult]:
    """Delete (or with dry_run count) what is past its retention, table by table. Audited: one
    `audit.pruned` event in the transaction of the first batch that deletes audit rows, and
    one `retention.pruned` event with the counts per table at the end (not for a dry run)."""
    c = cutoffs(now=now, older_than=older_than)  # `now`: a simulated day (make bench-scale)
    size = batch or settings.PRUNE_BATCH
    results: list[TableResult] = []
    with connection.cursor() as cursor:
        # A dry run's counts may read many rows (no lock but ACCESS SHARE); batches are short.
        if dry_run:
            cursor.execute("SET statement_timeout = 0")
    for table, before in _plan(c):
        if dry_run:
            results.append(TableResult(table, before, rows=_count(table, before)))
        elif table in _CHILDREN_SQL:
            results.append(_prune_children_counted(table, before, size))
        elif table == "audit_auditevent":
            results.append(_prune_audit(before, size))
        else:
            results.append(_prune_table(table, before, size))
    if not dry_run:
        audit_record(
            actor=SYSTEM,
            action="retention.pruned",
            target_type="retention",
            target="prune",
            data={r.table: {"rows": r.rows, "before": r.before.isoformat()} for r in results},
        )
    return results


def _prune_table(table: str, before: datetime, size: int) -> TableResult:
    """Sessions, deliveries or rollups before `before`, `size` rows (adapting) per batch."""
    params: dict[str, Any] = {"before": before}
    sql = {"sessions_app_session": _SESSIONS_SQL, "webhooks_delivery": _DELIVERIES_SQL}.get(table, _ROLLUPS_SQL)
    if table == "webhooks_delivery":
        with connection.cursor() as cursor:
            cursor.execute(_DELIVERIES_BOUND, params)
            row = cursor.fetchone()
        params["bound"] = row[0] if row else 0
    result = TableResult(table, before)
    _batches(lambda n: _execute(sql, {**params, "batch": n}), result, batch=size)
    return result


def _prune_children_counted(table: str, before: datetime, size: int) -> TableResult:
    """_prune_children with the rows deleted counted exactly (a batch of sessions without
    children deletes none but is progress)."""
    result = TableResult(table, before)
    position: dict[str, Any] = {
        "after_at": datetime(1970, 1, 1, tzinfo=before.tzinfo),
        "after_id": "00000000-0000-0000-0000-000000000000",
    }
    sessions = max(1, size // 10)  # about ten child rows per session
    while True:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_ENDED_SESSIONS, {"before": before, "batch": sessions, **position})
            rows = cursor.fetchall()
            if rows:
                position["after_id"], position["after_at"] = rows[-1][0], rows[-1][1]
                cursor.execute(_CHILDREN_SQL[table], {"ids": [r[0] for r in rows]})
                deleted = cursor.rowcount
        if not rows:
            return result
        elapsed = (time.perf_counter() - started) * 1000
        result.rows += deleted
        if deleted:
            result.batch_ms.append(elapsed)
        if elapsed > BATCH_HIGH_MS:
            sessions = max(1, sessions // 2)
        elif elapsed < BATCH_LOW_MS:
            sessions = min(BATCH_MAX, sessions * 2)


_MAY_PRUNE_SQL = (
    "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'registry_audit_pruner')"
    " AND pg_has_role(current_user, 'registry_audit_pruner', 'MEMBER')"
)


def _prune_audit(before: datetime, size: int) -> TableResult:
    """Audit rows before `before`, deleted by a role that holds the prune's exception
    (registry_audit_pruner, audit migration 0005): through AUDIT_PRUNE_DATABASE_URL, a connection
    of its own, when set; else through the application's connection, which may do it only when
    its role is a member (a superuser in development; never in production, where the web and
    the workers must not be able to delete audit rows). Each batch sets the transaction-local
    cutoff the trigger checks; the first batch that deletes anything is recorded as
    `audit.pruned` (through the application's connection)."""
    result = TableResult("audit_auditevent", before)
    url = settings.AUDIT_PRUNE_DATABASE_URL
    if url:
        with psycopg.connect(
            url, connect_timeout=settings.DATABASES["default"]["OPTIONS"].get("connect_timeout", 2)
        ) as pruner:
            _batches(_audit_batch(before, lambda: pruner.transaction(), pruner.cursor), result, batch=size)
        return result
    with connection.cursor() as cursor:
        cursor.execute(_MAY_PRUNE_SQL)
        allowed = cursor.fetchone()[0]
    if not allowed:
        logger.warning(
            "audit rows are not pruned: set AUDIT_PRUNE_DATABASE_URL to a role in registry_audit_pruner "
            "(docs/operations.md, Database roles)"
        )
        return result
    _batches(_audit_batch(before, transaction.atomic, connection.cursor), result, batch=size)
    return result


def _audit_batch(before: datetime, atomic: Callable[[], Any], cursor_of: Callable[[], Any]) -> Callable[[int], int]:
    recorded = False

    def one(n: int) -> int:
        nonlocal recorded
        with atomic(), cursor_of() as cursor:
            cursor.execute("SELECT set_config('registry.audit_prune_before', %s, true)", [before.isoformat()])
            cursor.execute(_AUDIT_SQL, {"before": before, "batch": n})
            deleted: int = cursor.rowcount
        if deleted and not recorded:
            audit_record(
                actor=SYSTEM,
                action="audit.pruned",
                target_type="audit",
                target="audit_auditevent",
                data={"before": before.isoformat(), "retention_days": settings.RETENTION_AUDIT_DAYS},
            )
            recorded = True
        return deleted

    return one
