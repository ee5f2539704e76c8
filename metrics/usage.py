"""Usage and routing counts per version without a write per call: each process counts in
memory and a daemon thread adds the counts every FLUSH_SECONDS with one upsert per version
into metrics_versionusage (the lifetime totals a usage or metrics GET reads: one row, O(1) at
any history) and one into metrics_versionday (the same per UTC day, kept for
RETENTION_USAGE_ROLLUP_DAYS). Pruning sessions and turns never changes these counts.
A process killed with kill -9 loses at most its last FLUSH_SECONDS of counts: usage figures
are for capacity and clean-up decisions, not billing."""

import atexit
import math
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from registry.selectors import version_ids_existing

FLUSH_SECONDS = 5.0

# Routing latency histogram: bucket i holds latencies below 2 ** ((i + 1) / 4) µs, four buckets
# per doubling (a percentile read from it is within 19 % of the exact one), the last one open.
LATENCY_BUCKETS = 100

# The counters, in column order (metrics_versionusage and metrics_versionday have them all).
COUNTERS = (
    "fetches",
    "sessions_started",
    "turns",
    "routed_sessions",
    "reported_turns",
    "invocations",
    "invocation_hits",
    "routed_loads",
    "invalid_loads",
    "decided_turns",
    "decision_errors",
)


def latency_bucket(latency_us: int) -> int:
    if latency_us <= 1:
        return 0
    return min(LATENCY_BUCKETS - 1, max(0, math.ceil(4 * math.log2(latency_us)) - 1))


def bucket_upper_us(index: int) -> float:
    return float(2 ** ((index + 1) / 4))


@dataclass
class _Pending:
    counts: Counter[str] = field(default_factory=Counter)
    latency: Counter[int] = field(default_factory=Counter)
    first_used: float | None = None
    last_used: float | None = None
    last_fetch: float | None = None

    def used(self, at: float) -> None:
        self.first_used = at if self.first_used is None else min(self.first_used, at)
        self.last_used = at if self.last_used is None else max(self.last_used, at)


_lock = threading.Lock()
_pending: dict[tuple[int, date], _Pending] = defaultdict(_Pending)
_flusher: threading.Thread | None = None


def _record(version_id: int, *, at: float | None = None, **deltas: int) -> _Pending:
    global _flusher
    at = time.time() if at is None else at
    day = datetime.fromtimestamp(at, tz=UTC).date()
    entry = _pending[(version_id, day)]
    for name, delta in deltas.items():
        if delta:
            entry.counts[name] += delta
    if _flusher is None and settings.USAGE_FLUSH_THREAD:
        _flusher = threading.Thread(target=_run, name="usage-flush", daemon=True)
        _flusher.start()
        atexit.register(flush)
    return entry


def fetch_recorded(version_id: int) -> None:
    """Count one pinned fetch of `version_id` (about a microsecond; no I/O)."""
    now = time.time()
    with _lock:
        entry = _record(version_id, at=now, fetches=1)
        entry.last_fetch = now
        entry.last_used = now if entry.last_used is None else max(entry.last_used, now)


def sessions_started(version_ids: list[int]) -> None:
    """Count session starts (one entry per session), each also a use of its version."""
    now = time.time()
    with _lock:
        for version_id in version_ids:
            _record(version_id, at=now, sessions_started=1).used(now)


def version_used(version_ids: list[int]) -> None:
    """A renewal or an end: moves the versions' last use."""
    now = time.time()
    with _lock:
        for version_id in version_ids:
            entry = _record(version_id, at=now)
            entry.last_used = now if entry.last_used is None else max(entry.last_used, now)


def turn_routed(version_id: int, *, number: int, latency_us: int) -> None:
    """A routed turn (number 1 is the first of its session)."""
    with _lock:
        entry = _record(version_id, turns=1, routed_sessions=1 if number == 1 else 0)
        entry.latency[latency_bucket(latency_us)] += 1


def turn_reported(
    version_id: int,
    *,
    loaded: set[str],
    routed: list[str],
    before: list[str] | None,
    after: list[str],
    expected_before: list[str] | None = None,
    expected: list[str] | None = None,
) -> None:
    """A turn report, which replaces an earlier one of the same turn: adds what it contributes
    to the routing counts and takes back what the earlier report had contributed.

    A turn that invoked something is a decision; it is a decision error when it invoked a skill
    outside the loaded ones, or, when the report carries a label of the skills the turn needed
    (`expected`), a loaded skill that is not among them."""

    def contribution(invoked: list[str] | None, needed: list[str] | None) -> Counter[str]:
        if invoked is None:
            return Counter()
        names = set(invoked)
        wrong = any(n not in loaded for n in invoked) or (needed is not None and any(n not in needed for n in invoked))
        return Counter(
            decided_turns=1 if invoked else 0,
            decision_errors=1 if invoked and wrong else 0,
            reported_turns=1,
            invocations=len(invoked),
            invocation_hits=sum(1 for name in invoked if name in loaded),
            routed_loads=len(routed),
            invalid_loads=sum(1 for name in routed if name not in names),
        )

    delta = contribution(after, expected)
    delta.subtract(contribution(before, expected_before))
    with _lock:
        _record(version_id, **dict(delta))


def pending(version_id: int, counter: str) -> int:
    """This process's count of `counter` for the version not yet flushed (tests, diagnostics)."""
    with _lock:
        return sum(e.counts.get(counter, 0) for (vid, _day), e in _pending.items() if vid == version_id)


_COLUMNS = ", ".join(COUNTERS)
_ADD = ", ".join(f"{c} = {{table}}.{c} + EXCLUDED.{c}" for c in COUNTERS)
_MERGE = f"""
    {_ADD},
    first_used_at = LEAST({{table}}.first_used_at, EXCLUDED.first_used_at),
    last_used_at = GREATEST({{table}}.last_used_at, EXCLUDED.last_used_at),
    last_fetch_at = GREATEST({{table}}.last_fetch_at, EXCLUDED.last_fetch_at),
    latency_buckets = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
                            FROM unnest({{table}}.latency_buckets, EXCLUDED.latency_buckets) AS t(a, b))
"""
# The version id goes last. flush() drops a count for a version id that is not (or no longer,
# in tests) in the database, asking the registry (registry.selectors.version_ids_existing), so
# that one such id does not fail the whole batch.
_VALUES = ", ".join(["%s"] * len(COUNTERS))
_TOTAL_SQL = f"""
INSERT INTO metrics_versionusage ({_COLUMNS}, first_used_at, last_used_at, last_fetch_at, latency_buckets, version_id)
VALUES ({_VALUES}, %s, %s, %s, %s, %s)
ON CONFLICT (version_id) DO UPDATE SET {_MERGE.format(table="metrics_versionusage")}
"""
_DAY_SQL = f"""
INSERT INTO metrics_versionday (day, {_COLUMNS}, first_used_at, last_used_at, last_fetch_at, latency_buckets,
    version_id)
VALUES (%s, {_VALUES}, %s, %s, %s, %s, %s)
ON CONFLICT (version_id, day) DO UPDATE SET {_MERGE.format(table="metrics_versionday")}
"""


def _moment(at: float | None) -> datetime | None:
    return datetime.fromtimestamp(at, tz=UTC) if at is not None else None


def flush() -> int:
    """Write the pending counts; returns how many (version, day) rows were written."""
    with _lock:
        pending = dict(_pending)
        _pending.clear()
    if not pending:
        return 0
    totals: dict[int, _Pending] = defaultdict(_Pending)
    for (version_id, _day), entry in pending.items():
        total = totals[version_id]
        total.counts.update(entry.counts)
        total.latency.update(entry.latency)
        for at in (entry.first_used, entry.last_used):
            if at is not None:
                total.used(at)
        if entry.last_fetch is not None:
            total.last_fetch = max(total.last_fetch or 0.0, entry.last_fetch)

    def row(entry: _Pending) -> list[Any]:
        latency = [entry.latency.get(i, 0) for i in range(LATENCY_BUCKETS)]
        return [
            *(entry.counts.get(c, 0) for c in COUNTERS),
            _moment(entry.first_used),
            _moment(entry.last_used),
            _moment(entry.last_fetch),
            latency,
        ]

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # One transaction: a failure re-queues everything and counts nothing twice.
            # Version ids in ascending order: two processes flushing at once lock the rows in
            # the same order and cannot deadlock. A version deleted between the check and the
            # INSERT (only tests delete versions) fails this flush; the next one drops it.
            known = version_ids_existing(totals)
            cursor.executemany(_TOTAL_SQL, [[*row(e), vid] for vid, e in sorted(totals.items()) if vid in known])
            cursor.executemany(
                _DAY_SQL, [[day, *row(e), vid] for (vid, day), e in sorted(pending.items()) if vid in known]
            )
    except Exception:
        # Database away: keep the counts for the next flush rather than lose them.
        with _lock:
            for key, entry in pending.items():
                mine = _pending[key]
                mine.counts.update(entry.counts)
                mine.latency.update(entry.latency)
                for at in (entry.first_used, entry.last_used):
                    if at is not None:
                        mine.used(at)
                if entry.last_fetch is not None:
                    mine.last_fetch = max(mine.last_fetch or 0.0, entry.last_fetch)
        raise
    return len(pending)


def _run() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        close_old_connections()
        try:
            flush()
        except Exception:  # the next round tries again; never kill the thread
            pass
