"""The evidence rollups' writes.

Per-turn usage (tokens, cost, tool results, latency) is counted in memory and added every
FLUSH_SECONDS with one upsert per table, as metrics.usage does for fetches: the per-turn path
writes no statement of its own. A process killed with kill -9 loses at most its last
FLUSH_SECONDS of usage, as for the usage counts.

Outcomes and scores are rare (one or a few per session) and must agree with their raw rows
(an idempotent re-send must not count twice), so they are added in the transaction that writes
the raw row, with one upsert (`add_now`): an acknowledged end's outcome is counted. That upsert
holds its row's lock until the end commits, so ends of one version, label and day would queue
on one row (bench/outcome_contention.py: at 64 clients a third of the plain end's rate and a
p99 six times longer); each end adds to the row of its session's shard instead
(OUTCOME_SHARDS rows per version, label and day at most), and reads sum them."""

import atexit
import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from registry.selectors import version_ids_existing

FLUSH_SECONDS = 5.0
OUTCOME_SHARDS = 16
LATENCY_BUCKETS = 64  # bucket i: below 2 ** ((i + 1) / 3) ms, three per doubling (up to ~2.6 days)

INTEGER_COLUMNS = (
    "outcomes",
    "resolved",
    "escalated",
    "abandoned",
    "failed",
    "turns",
    "turn_sessions",
    "usage_turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "priced_turns",
    "tool_results",
    "tool_errors",
)
FLOAT_COLUMNS = ("input_cost", "output_cost", "cost_sq")
COLUMNS = (*INTEGER_COLUMNS, *FLOAT_COLUMNS)


def latency_bucket(ms: int) -> int:
    if ms <= 1:
        return 0
    return min(LATENCY_BUCKETS - 1, max(0, math.ceil(3 * math.log2(ms)) - 1))


def bucket_upper_ms(index: int) -> float:
    return float(2 ** ((index + 1) / 3))


@dataclass
class Delta:
    values: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, other: "Delta") -> None:
        for k, v in other.values.items():
            self.values[k] += v
        for i, c in other.latency.items():
            self.latency[i] += c


Key = tuple[int, str, date]  # version id, label ("" none), UTC day
ScoreKey = tuple[int, str, date, str]

_lock = threading.Lock()
_pending: dict[Key, Delta] = defaultdict(Delta)
_flusher: threading.Thread | None = None


def today() -> date:
    return datetime.now(tz=UTC).date()


def record(version_id: int, label: str | None, delta: Delta) -> None:
    """Count a turn's usage in memory (no I/O)."""
    global _flusher
    with _lock:
        _pending[(version_id, label or "", today())].add(delta)
        if _flusher is None and settings.USAGE_FLUSH_THREAD:
            _flusher = threading.Thread(target=_run, name="evidence-flush", daemon=True)
            _flusher.start()
            atexit.register(flush)


_SET = ", ".join(f"{c} = evidence_evidenceday.{c} + EXCLUDED.{c}" for c in COLUMNS)
_DAY_SQL = f"""
INSERT INTO evidence_evidenceday (version_id, label, day, shard, {", ".join(COLUMNS)}, latency_buckets)
VALUES (%s, %s, %s, %s, {", ".join(["%s"] * len(COLUMNS))}, %s)
ON CONFLICT (version_id, label, day, shard) DO UPDATE SET {_SET},
    latency_buckets = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
        FROM unnest(evidence_evidenceday.latency_buckets, EXCLUDED.latency_buckets) AS t(a, b))
"""
_SCORE_SQL = """
INSERT INTO evidence_scoreday (version_id, label, day, name, n, total, total_sq) VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (version_id, label, day, name) DO UPDATE SET n = evidence_scoreday.n + EXCLUDED.n,
    total = evidence_scoreday.total + EXCLUDED.total, total_sq = evidence_scoreday.total_sq + EXCLUDED.total_sq
"""


def _row(key: Key, delta: Delta, shard: int = 0) -> list[Any]:
    values = [int(delta.values.get(c, 0)) for c in INTEGER_COLUMNS] + [
        float(delta.values.get(c, 0.0)) for c in FLOAT_COLUMNS
    ]
    latency = [delta.latency.get(i, 0) for i in range(LATENCY_BUCKETS)] if delta.latency else []
    return [*key, shard, *values, latency]


def shard_of(session_id: UUID | str) -> int:
    """The rollup shard a session's outcome goes to (a UUID 7's low bits are random)."""
    return UUID(str(session_id)).int % OUTCOME_SHARDS


def add_now(*, version_id: int, label: str | None, delta: Delta, shard: int = 0) -> None:
    """Add to today's rollup row of `shard` in the caller's transaction (one statement)."""
    with connection.cursor() as cursor:
        cursor.execute(_DAY_SQL, _row((version_id, label or "", today()), delta, shard))


def score_add_now(*, version_id: int, label: str | None, name: str, value: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_SCORE_SQL, [version_id, label or "", today(), name, 1, value, value * value])


def flush() -> int:
    """Write the pending usage; returns how many rollup rows were written."""
    with _lock:
        pending = dict(_pending)
        _pending.clear()
    if not pending:
        return 0
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Sorted: two processes flushing at once lock the rows in the same order.
            known = version_ids_existing({key[0] for key in pending})
            rows = [_row(key, d) for key, d in sorted(pending.items()) if key[0] in known]
            cursor.executemany(_DAY_SQL, rows)
    except Exception:
        with _lock:  # database away: keep them for the next flush
            for key, delta in pending.items():
                _pending[key].add(delta)
        raise
    return len(pending)


def pending_turns(version_id: int) -> int:
    """This process's usage turns of the version not yet flushed (tests, diagnostics)."""
    with _lock:
        return int(sum(d.values.get("usage_turns", 0) for k, d in _pending.items() if k[0] == version_id))


def _run() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        close_old_connections()
        try:
            flush()
        except Exception:  # the next round tries again; never kill the thread
            pass
