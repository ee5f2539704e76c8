"""Seed the scale data set in seconds, with set-based SQL (generate_series), not the API:

    manage.py seed_scale --bundle scale --versions 10000 --ended 1000000 --active 100000 [--lapsed N]

One bundle with `--versions` versions: all but the last two are inserted as drained filler
(distinct canonical documents, their hashes computed by PostgreSQL, which the immutability CHECK
verifies); the last two are published through the services, `production` targets the newest and
the one before drains with `--active`/10 sessions still on it. Then `--ended` ended sessions spread
over every version and `--active` active ones (`--lapsed` more whose lease already ran out, for
the sweep), all of one agent key whose secret is printed last. `make bench-scale` uses this."""

from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection

from access.actors import SYSTEM
from access.services import api_key_create
from core.ids import uuid7_sql
from knowledge.models import Pack
from registry.services import bundle_create, label_move, version_publish
from webhooks.models import Endpoint


def _content(text: str) -> dict[str, Any]:
    return {"system_prompt": text, "tools": [], "model": {"name": "scale-model"}}


class Command(BaseCommand):
    help = "Seed a bundle with many versions and many sessions (bench/scale.py)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--bundle", default="scale")
        parser.add_argument("--versions", type=int, default=10_000)
        parser.add_argument("--ended", type=int, default=1_000_000)
        parser.add_argument("--active", type=int, default=100_000)
        parser.add_argument("--lapsed", type=int, default=0)
        parser.add_argument("--turns-per-session", type=int, default=0, help="skill turns of each ended session")
        parser.add_argument("--file-reads", action="store_true", help="one file read per ended session")
        parser.add_argument("--deliveries", type=int, default=0, help="finished webhook deliveries")
        parser.add_argument("--history-days", type=int, default=25, help="ended sessions spread over this many days")

    def handle(self, *args: Any, **options: Any) -> None:
        name, versions = options["bundle"], max(2, options["versions"])
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
        old = version_publish(
            bundle=bundle, content=_content("Scale: the version before."), message="old", actor=SYSTEM
        )
        label_move(bundle=bundle, name="production", version=old.version, actor=SYSTEM, reason="scale seed")
        new = version_publish(bundle=bundle, content=_content("Scale: the live version."), message="new", actor=SYSTEM)
        draining_share = options["active"] // 10
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
                    "count": options["ended"],
                    "old": old.version.pk,
                    "new": new.version.pk,
                    "first": first,
                    "filler": max(1, versions - 2),
                    "spread": options["history_days"] * 86400 / 1_000_000,
                },
            )
            # Active sessions: most on the old version until the label moves, a tenth stay there.
            for version_id, count in (
                (old.version.pk, draining_share),
                (new.version.pk, options["active"] - draining_share),
            ):
                cursor.execute(
                    insert.format(
                        version="%(version)s", status="'active'", expires="now() + interval '1 hour'", ended="NULL"
                    ),
                    {**common, "count": count, "version": version_id},
                )
            if options["lapsed"]:
                cursor.execute(
                    insert.format(
                        version="%(version)s", status="'active'", expires="now() - interval '1 minute'", ended="NULL"
                    ),
                    {**common, "count": options["lapsed"], "version": new.version.pk},
                )
        label_move(bundle=bundle, name="production", version=new.version, actor=SYSTEM, reason="scale seed")
        with connection.cursor() as cursor:
            # Each ended session's turns, numbered 1..N, routed and reported: one statement (and, in
            # autocommit, one commit) per turn number, so 20 M rows go in as 20 commits of 1 M and
            # an interrupted seed keeps what it wrote (as one statement, 20 M rows ran past an
            # hour and were rolled back whole).
            for number in range(1, options["turns_per_session"] + 1):
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
            if options["file_reads"]:
                pack = Pack.objects.create(name=f"{name}-pack", created_by="system").pk
                cursor.execute(
                    """
                    INSERT INTO knowledge_fileread (session_id, pack_id, path, known_sha256, read_at)
                    SELECT id, %(pack)s, 'DUTY.md', repeat('a', 64), started_at FROM sessions_app_session
                    WHERE bundle_id = %(bundle)s AND status = 'ended'
                    """,
                    {"pack": pack, "bundle": bundle.pk},
                )
            if options["deliveries"]:
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
                    {"endpoint": endpoint.pk, "count": options["deliveries"], "name": name},
                )
            for table in (
                "sessions_app_session",
                "registry_bundleversion",
                "skills_skillturn",
                "knowledge_fileread",
                "webhooks_delivery",
            ):
                cursor.execute(f"ANALYZE {table}")
        self.stdout.write(
            f"seeded bundle {name!r}: {versions} versions, {options['ended']} ended, {options['active']} active"
            f" ({draining_share} on draining version {old.version.number}), {options['lapsed']} lapsed sessions"
        )
        self.stdout.write(secret)
