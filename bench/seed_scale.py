"""Seed the scale data set in seconds, with set-based SQL (generate_series), not the API:

    .venv/bin/python bench/seed_scale.py --bundle scale --versions 10000 --ended 1000000 --active 100000 [--lapsed N]

One bundle with `--versions` versions: all but the last two are inserted as drained filler
(distinct canonical documents, their hashes computed by PostgreSQL, which the immutability CHECK
verifies); the last two are published through the services, `production` targets the newest and
the one before drains with `--active`/10 sessions still on it. Then `--ended` ended sessions spread
over every version and `--active` active ones (`--lapsed` more whose lease already ran out, for
the sweep), all of one agent key whose secret is printed last. `make bench-scale` (bench/scale.py)
runs it once per database; the database is DATABASE_URL's (or, in a checkout where `make run`
has run, the one in .run/services.env, as for manage.py). A load generator, not a command of the
service: it writes the rows of five apps (registry, sessions_app, skills, knowledge, webhooks)
at once, so it lives with the benchmarks rather than in any one of them."""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _content(text: str) -> dict[str, Any]:
    return {"system_prompt": text, "tools": [], "model": {"name": "scale-model"}}


def seed(
    *,
    name: str = "scale",
    versions: int = 10_000,
    ended: int = 1_000_000,
    active: int = 100_000,
    lapsed: int = 0,
    turns_per_session: int = 0,
    file_reads: bool = False,
    deliveries: int = 0,
    history_days: int = 25,
) -> tuple[str, str]:
    """Seed the data set (Django set up, on its default database): (what was seeded, in one
    line; the agent key's secret)."""
    from django.db import connection

    from access.actors import SYSTEM
    from access.services import api_key_create
    from core.ids import uuid7_sql
    from knowledge.models import Pack
    from registry.services import bundle_create, label_move, version_publish
    from webhooks.models import Endpoint

    versions = max(2, versions)
    with connection.cursor() as cursor:
        # A million rows in one statement outlast the service's statement timeout.
        cursor.execute("SET statement_timeout = 0")
    bundle = bundle_create(name=name, description="scale data set", actor=SYSTEM)
    key, secret = api_key_create(name=f"{name}-agent", role="agent", actor=SYSTEM)
    with connection.cursor() as cursor:
        # Filler versions 1..N-2, drained: distinct documents, canonical (sorted, compact) by
        # construction, hashed by PostgreSQL.
        cursor.execute(
            """
            INSERT INTO registry_bundleversion (bundle_id, number, canonical, content_hash, message, author,
                created_at, state, drained_at, revoke_reason)
            SELECT %(bundle)s, n, doc, encode(sha256(doc), 'hex'), 'scale filler', 'system',
                now() - interval '90 days', 'drained', now() - interval '60 days', ''
            FROM (SELECT n, convert_to('{"model":{"name":"scale-model"},"system_prompt":"Scale version '
                  || n || '.","tools":[]}', 'UTF8') AS doc
                  FROM generate_series(1, %(filler)s) AS n) AS docs
            """,
            {"bundle": bundle.pk, "filler": versions - 2},
        )
    old = version_publish(bundle=bundle, content=_content("Scale: the version before."), message="old", actor=SYSTEM)
    label_move(bundle=bundle, name="production", version=old.version, actor=SYSTEM, reason="scale seed")
    new = version_publish(bundle=bundle, content=_content("Scale: the live version."), message="new", actor=SYSTEM)
    draining_share = active // 10
    with connection.cursor() as cursor:
        insert = """
            INSERT INTO sessions_app_session (id, bundle_id, version_id, label, api_key_id, status, ttl_seconds,
                started_at, last_seen_at, expires_at, ended_at, variables)
            SELECT {uuid_now}, %(bundle)s, {version}, 'production', %(key)s, {status}, 1800,
                now() - interval '1 hour', now() - interval '1 hour', {expires}, {ended}, '{{}}'::jsonb
            FROM generate_series(1, %(count)s) AS i
        """.replace("{uuid_now}", uuid7_sql("(now() - interval '1 hour')"))
        common = {"bundle": bundle.pk, "key": key.pk}
        # Ended sessions: two in five on each of the two real versions (where history piles
        # up: the live version's own past), one in five spread over the filler versions; they
        # ended over the last --history-days days (inside the retention: kept, not pruned).
        ended_insert = """
            INSERT INTO sessions_app_session (id, bundle_id, version_id, label, api_key_id, status, ttl_seconds,
                started_at, last_seen_at, expires_at, ended_at, variables)
            SELECT {uuid_t}, %(bundle)s,
                CASE WHEN i %% 5 < 2 THEN %(old)s WHEN i %% 5 < 4 THEN %(new)s
                     ELSE %(first)s + (i %% %(filler)s) END,
                'production', %(key)s, 'ended', 1800, t - interval '10 minutes', t, t + interval '30 minutes', t,
                '{}'::jsonb
            FROM (SELECT i, now() - interval '1 hour' - (i %% 1000000) * %(spread)s * interval '1 second' AS t
                  FROM generate_series(1, %(count)s) AS i) AS g
        """.replace("{uuid_t}", uuid7_sql("(t - interval '10 minutes')"))  # ids as session_start makes them
        cursor.execute("SELECT min(id) FROM registry_bundleversion WHERE bundle_id = %s", [bundle.pk])
        first = cursor.fetchone()[0]
        cursor.execute(
            ended_insert,
            {
                **common,
                "count": ended,
                "old": old.version.pk,
                "new": new.version.pk,
                "first": first,
                "filler": max(1, versions - 2),
                "spread": history_days * 86400 / 1_000_000,
            },
        )
        # Active sessions: most on the old version until the label moves, a tenth stay there.
        for version_id, count in (
            (old.version.pk, draining_share),
            (new.version.pk, active - draining_share),
        ):
            cursor.execute(
                insert.format(
                    version="%(version)s", status="'active'", expires="now() + interval '1 hour'", ended="NULL"
                ),
                {**common, "count": count, "version": version_id},
            )
        if lapsed:
            cursor.execute(
                insert.format(
                    version="%(version)s", status="'active'", expires="now() - interval '1 minute'", ended="NULL"
                ),
                {**common, "count": lapsed, "version": new.version.pk},
            )
    label_move(bundle=bundle, name="production", version=new.version, actor=SYSTEM, reason="scale seed")
    with connection.cursor() as cursor:
        # Each ended session's turns, numbered 1..N, routed and reported: one statement (and, in
        # autocommit, one commit) per turn number, so 20 M rows go in as 20 commits of 1 M and
        # an interrupted seed keeps what it wrote (as one statement, 20 M rows ran past an
        # hour and were rolled back whole).
        for number in range(1, turns_per_session + 1):
            cursor.execute(
                """
                INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills,
                    invoked, latency_us, created_at, reported_at)
                SELECT s.id, s.version_id, %(n)s, '["greet"]'::jsonb, '["refund_order"]'::jsonb, '[]'::jsonb,
                    '["refund_order"]'::jsonb, 200 + (%(n)s * 37) %% 400, s.started_at, s.started_at
                FROM sessions_app_session s
                WHERE s.bundle_id = %(bundle)s AND s.status = 'ended'
                """,
                {"n": number, "bundle": bundle.pk},
            )
        if file_reads:
            pack = Pack.objects.create(name=f"{name}-pack", created_by="system").pk
            cursor.execute(
                """
                INSERT INTO knowledge_fileread (session_id, pack_id, path, known_sha256, read_at)
                SELECT id, %(pack)s, 'DUTY.md', repeat('a', 64), started_at FROM sessions_app_session
                WHERE bundle_id = %(bundle)s AND status = 'ended'
                """,
                {"pack": pack, "bundle": bundle.pk},
            )
        if deliveries:
            # Over the last 25 days, older first: ids grow with created_at, as in service (the
            # prune bounds its walk by that).
            endpoint = Endpoint.objects.create(
                url="https://hooks.example.com/scale", events=[], secret="scale", created_by="system"
            )
            cursor.execute(
                """
                INSERT INTO webhooks_delivery (endpoint_id, event, message_id, payload, status, attempts,
                    response_status, latency_ms, error, created_at, delivered_at)
                SELECT %(endpoint)s, 'session.expired', 'msg_scale_' || %(name)s || '_' || i, '{}'::jsonb,
                    'succeeded', 1, 200, 20, '', t, t
                FROM (SELECT i, now() - (%(count)s - i) * (interval '25 days' / %(count)s) AS t
                      FROM generate_series(1, %(count)s) AS i) AS g
                """,
                {"endpoint": endpoint.pk, "count": deliveries, "name": name},
            )
        for table in (
            "sessions_app_session",
            "registry_bundleversion",
            "skills_skillturn",
            "knowledge_fileread",
            "webhooks_delivery",
        ):
            cursor.execute(f"ANALYZE {table}")
    summary = (
        f"seeded bundle {name!r}: {versions} versions, {ended} ended, {active} active"
        f" ({draining_share} on draining version {old.version.number}), {lapsed} lapsed sessions"
    )
    return summary, secret


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", default="scale")
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--ended", type=int, default=1_000_000)
    parser.add_argument("--active", type=int, default=100_000)
    parser.add_argument("--lapsed", type=int, default=0)
    parser.add_argument("--turns-per-session", type=int, default=0, help="skill turns of each ended session")
    parser.add_argument("--file-reads", action="store_true", help="one file read per ended session")
    parser.add_argument("--deliveries", type=int, default=0, help="finished webhook deliveries")
    parser.add_argument("--history-days", type=int, default=25, help="ended sessions spread over this many days")
    ns = parser.parse_args()

    from manage import load_run_env

    load_run_env()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    summary, secret = seed(
        name=ns.bundle,
        versions=ns.versions,
        ended=ns.ended,
        active=ns.active,
        lapsed=ns.lapsed,
        turns_per_session=ns.turns_per_session,
        file_reads=ns.file_reads,
        deliveries=ns.deliveries,
        history_days=ns.history_days,
    )
    print(summary)
    print(secret)  # last: bench/scale.py reads it
    return 0


if __name__ == "__main__":
    sys.exit(main())
