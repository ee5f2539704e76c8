"""Fetch counts per version without a write per fetch: each process counts in memory and a
daemon thread adds the counts to metrics_versionusage every FLUSH_SECONDS with one upsert.
A process killed with kill -9 loses at most its last FLUSH_SECONDS of counts: usage figures
are for capacity and clean-up decisions, not billing."""

import atexit
import threading
import time
from collections import Counter
from datetime import UTC, datetime

from django.conf import settings
from django.db import close_old_connections, connection

FLUSH_SECONDS = 5.0

_lock = threading.Lock()
_pending: Counter[int] = Counter()
_last: dict[int, float] = {}
_flusher: threading.Thread | None = None


def fetch_recorded(version_id: int) -> None:
    """Count one pinned fetch of `version_id` (about a microsecond; no I/O)."""
    global _flusher
    with _lock:
        _pending[version_id] += 1
        _last[version_id] = time.time()
        if _flusher is None and settings.USAGE_FLUSH_THREAD:
            _flusher = threading.Thread(target=_run, name="usage-flush", daemon=True)
            _flusher.start()
            atexit.register(flush)


def flush() -> int:
    """Write the pending counts; returns how many versions were written."""
    with _lock:
        counts, last = dict(_pending), dict(_last)
        _pending.clear()
        _last.clear()
    if not counts:
        return 0
    rows = [(n, datetime.fromtimestamp(last[vid], tz=UTC), vid) for vid, n in sorted(counts.items())]
    try:
        with connection.cursor() as cursor:
            cursor.executemany(
                # INSERT ... SELECT: a count for a version id that is not (or no longer, in
                # tests) in the database is dropped instead of failing the whole batch.
                """INSERT INTO metrics_versionusage (version_id, fetches, last_fetch_at)
                   SELECT id, %s, %s FROM registry_bundleversion WHERE id = %s
                   ON CONFLICT (version_id) DO UPDATE SET fetches = metrics_versionusage.fetches + EXCLUDED.fetches,
                   last_fetch_at = GREATEST(metrics_versionusage.last_fetch_at, EXCLUDED.last_fetch_at)""",
                rows,
            )
    except Exception:
        # Database away: keep the counts for the next flush rather than lose them.
        with _lock:
            for vid, n in counts.items():
                _pending[vid] += n
                _last[vid] = max(_last.get(vid, 0.0), last[vid])
        raise
    return len(rows)


def _run() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        close_old_connections()
        try:
            flush()
        except Exception:  # the next round tries again; never kill the thread
            pass
