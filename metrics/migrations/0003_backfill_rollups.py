"""Counts of what happened before the rollups existed, once, from the raw rows: sessions per
version, and the routing counts and latency histogram (metrics.usage.latency_bucket in SQL) from
the skill turns.

Rolling-upgrade safe: not atomic (each statement commits on its own), and the raw rows are read
in chunks (by id), each one statement well under MIGRATION_STATEMENT_TIMEOUT_MS, taking no lock
that blocks a session start or a turn. The chunks are added up in a scratch table, created
afresh on every attempt, so a retry after a failure counts nothing twice; the last statement
then writes the totals into metrics_versionusage (one row per version: a moment)."""

from django.db import migrations

SESSION_CHUNK = 50_000
TURN_CHUNK = 50_000

_BUCKET = (
    "CASE WHEN latency_us <= 1 THEN 0 ELSE LEAST(99, GREATEST(0, ceil(4 * log(2, latency_us::numeric))::int - 1)) END"
)

SCRATCH = """
DROP TABLE IF EXISTS metrics_backfill;
CREATE UNLOGGED TABLE metrics_backfill (
    version_id bigint PRIMARY KEY, sessions_started bigint NOT NULL DEFAULT 0, first_used_at timestamptz,
    last_used_at timestamptz, turns bigint NOT NULL DEFAULT 0, routed_sessions bigint NOT NULL DEFAULT 0,
    reported_turns bigint NOT NULL DEFAULT 0, invocations bigint NOT NULL DEFAULT 0,
    invocation_hits bigint NOT NULL DEFAULT 0, routed_loads bigint NOT NULL DEFAULT 0,
    invalid_loads bigint NOT NULL DEFAULT 0, latency_buckets bigint[]
);
"""

SESSIONS = """
INSERT INTO metrics_backfill AS b (version_id, sessions_started, first_used_at, last_used_at)
SELECT version_id, count(*), min(started_at), max(GREATEST(last_seen_at, ended_at))
FROM sessions_app_session WHERE id > %(after)s AND id <= %(upto)s GROUP BY version_id
ON CONFLICT (version_id) DO UPDATE SET sessions_started = b.sessions_started + EXCLUDED.sessions_started,
    first_used_at = LEAST(b.first_used_at, EXCLUDED.first_used_at),
    last_used_at = GREATEST(b.last_used_at, EXCLUDED.last_used_at)
"""

TURNS = f"""
WITH turns AS (
    SELECT version_id, number, invoked, resident || routed || session_skills AS loaded, routed,
        {_BUCKET} AS bucket
    FROM skills_skillturn WHERE id > %(after)s AND id <= %(upto)s
), counts AS (
    SELECT version_id, count(*) AS turns, count(*) FILTER (WHERE number = 1) AS routed_sessions,
        count(*) FILTER (WHERE invoked IS NOT NULL) AS reported_turns,
        coalesce(sum(jsonb_array_length(invoked)), 0) AS invocations,
        coalesce(sum((SELECT count(*) FROM jsonb_array_elements_text(invoked) AS n WHERE loaded ? n)), 0)
            AS invocation_hits,
        coalesce(sum(jsonb_array_length(routed)) FILTER (WHERE invoked IS NOT NULL), 0) AS routed_loads,
        coalesce(sum((SELECT count(*) FROM jsonb_array_elements_text(routed) AS n WHERE NOT invoked ? n))
            FILTER (WHERE invoked IS NOT NULL), 0) AS invalid_loads
    FROM turns GROUP BY version_id
), histogram AS (
    SELECT v.version_id, array_agg(coalesce(c.n, 0) ORDER BY b) AS buckets
    FROM (SELECT DISTINCT version_id FROM turns) v CROSS JOIN generate_series(0, 99) AS b
    LEFT JOIN (SELECT version_id, bucket, count(*) AS n FROM turns GROUP BY 1, 2) c
        ON c.version_id = v.version_id AND c.bucket = b
    GROUP BY v.version_id
)
INSERT INTO metrics_backfill AS b (version_id, turns, routed_sessions, reported_turns, invocations,
    invocation_hits, routed_loads, invalid_loads, latency_buckets)
SELECT c.version_id, turns, routed_sessions, reported_turns, invocations, invocation_hits, routed_loads,
    invalid_loads, buckets
FROM counts c JOIN histogram h ON h.version_id = c.version_id
ON CONFLICT (version_id) DO UPDATE SET turns = b.turns + EXCLUDED.turns,
    routed_sessions = b.routed_sessions + EXCLUDED.routed_sessions,
    reported_turns = b.reported_turns + EXCLUDED.reported_turns,
    invocations = b.invocations + EXCLUDED.invocations,
    invocation_hits = b.invocation_hits + EXCLUDED.invocation_hits,
    routed_loads = b.routed_loads + EXCLUDED.routed_loads,
    invalid_loads = b.invalid_loads + EXCLUDED.invalid_loads,
    latency_buckets = ARRAY(SELECT coalesce(x, 0) + coalesce(y, 0)
                            FROM unnest(b.latency_buckets, EXCLUDED.latency_buckets) AS t(x, y))
"""

APPLY = """
INSERT INTO metrics_versionusage AS u (version_id, fetches, sessions_started, first_used_at, last_used_at, turns,
    routed_sessions, reported_turns, invocations, invocation_hits, routed_loads, invalid_loads, latency_buckets)
SELECT b.version_id, 0, sessions_started, first_used_at, last_used_at, turns, routed_sessions, reported_turns,
    invocations, invocation_hits, routed_loads, invalid_loads, latency_buckets
FROM metrics_backfill b JOIN registry_bundleversion v ON v.id = b.version_id
ON CONFLICT (version_id) DO UPDATE SET sessions_started = EXCLUDED.sessions_started,
    first_used_at = EXCLUDED.first_used_at,
    last_used_at = GREATEST(u.last_fetch_at, EXCLUDED.last_used_at), turns = EXCLUDED.turns,
    routed_sessions = EXCLUDED.routed_sessions, reported_turns = EXCLUDED.reported_turns,
    invocations = EXCLUDED.invocations, invocation_hits = EXCLUDED.invocation_hits,
    routed_loads = EXCLUDED.routed_loads, invalid_loads = EXCLUDED.invalid_loads,
    latency_buckets = EXCLUDED.latency_buckets;
DROP TABLE metrics_backfill;
"""


def backfill(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(SCRATCH)
        after = "00000000-0000-0000-0000-000000000000"
        while True:
            cursor.execute(
                "SELECT max(id::text)::uuid FROM (SELECT id FROM sessions_app_session WHERE id > %s"
                " ORDER BY id LIMIT %s) c",
                [after, SESSION_CHUNK],
            )
            upto = cursor.fetchone()[0]
            if upto is None:
                break
            cursor.execute(SESSIONS, {"after": after, "upto": upto})
            after = str(upto)
        cursor.execute("SELECT coalesce(max(id), 0) FROM skills_skillturn")
        last = cursor.fetchone()[0]
        for low in range(0, last, TURN_CHUNK):
            cursor.execute(TURNS, {"after": low, "upto": low + TURN_CHUNK})
        cursor.execute(APPLY)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("metrics", "0002_rollups")]
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
