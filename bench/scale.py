"""Does the registry stay flat as history grows (issue 20)? Seeds an almost empty database and a
large one (`bench/seed_scale.py`: 10,000 versions, 5,000,000 ended sessions with 4 skill turns
and a file read each, 1,000,000 webhook deliveries, 100,000 active sessions), measures in
interleaved rounds the per-turn path (pinned fetch, batched fetch, start, end, the drain probe)
and the control plane that used to count every historic session (version GET, label PUT,
rollback, revoke preview, release dry run, the drain dashboard, usage, routing metrics, one
sweep batch), prints p50 (p90) side by side with the ratio (goal: each within 1.2x), the EXPLAIN
plans of the statements that must stay index probes, and then simulates a month of load with
the daily prune on (days seeded with their timestamps) and prints the database size per day.

    make bench-scale                                  # the full data set (long: see docs/performance.md)
    make bench-scale ARGS="--ended 500000 --versions 1000 --deliveries 100000 --month-days 10"

The operations are timed in process (the service functions and selectors each view calls, and
the fast lane's `serve`), not over HTTP: what grows with the data is the database work, and
in-process timings keep the server out of the noise. On the embedded PostgreSQL it uses its
own databases (registry_scale_*, recreated); with DATABASE_URL it creates and drops
`<that database>_scale_*` on the same server. Appends a JSON line to bench/results.jsonl."""

import argparse
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.ids import uuid7_sql  # noqa: E402
from devtools.stack import start_services, stop_services  # noqa: E402

BIN = Path(sys.executable).parent
RESULTS_LOG = ROOT / "bench" / "results.jsonl"


def python(*args: str) -> str:
    """Run a script of this checkout (manage.py, bench/seed_scale.py) with this interpreter and
    environment; its standard output."""
    done = subprocess.run([str(BIN / "python"), *args], cwd=ROOT, capture_output=True, text=True, timeout=4 * 3600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def timed(fn: Any, items: list[Any]) -> dict[str, float]:
    """Per-call wall times of fn(item) in ms: median and p90."""
    fn(items[0])  # warm: connection, prepared statements, caches
    times = []
    for item in items[1:]:
        started = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"median_ms": round(statistics.median(times), 3), "p90_ms": round(times[int(len(times) * 0.9)], 3)}


def measure(bundle_name: str, secret: str, calls: int) -> dict[str, dict[str, float]]:
    from access.services import api_key_authenticate, api_key_lookup
    from api import fastlane
    from api.routes import BY_NAME
    from registry import lifecycle
    from registry.models import BundleVersion, VersionState
    from sessions_app import turns
    from sessions_app.models import Session
    from sessions_app.selectors import session_get
    from sessions_app.services import session_end
    from sessions_app.sweep import sessions_tally

    # The counts above SESSION_COUNT_EXACT_LIMIT show the sweep's tally: as a running sweep would
    # have left it.
    sessions_tally()
    actor = api_key_authenticate(secret=secret)
    assert actor is not None
    live = BundleVersion.objects.get(bundle__name=bundle_name, state=VersionState.LIVE)
    draining = BundleVersion.objects.filter(bundle__name=bundle_name, state=VersionState.DRAINING).first()
    active = list(
        Session.objects.active()
        .filter(version=live, expires_at__gt=time_now())
        .values_list("pk", flat=True)[: calls * 2 + 2]
    )
    headers = {b"authorization": f"Bearer {secret}".encode()}
    lookup = api_key_lookup(secret)
    assert lookup is not None
    prefix, digest = lookup
    figures = {
        "fetch": timed(
            lambda sid: fastlane.serve(route=BY_NAME["bundle"], session_id=str(sid), headers=headers), active[:calls]
        ),
        # The batched path (8 fetches per batch, as under load): time per batch.
        "fetch batch of 8": timed(
            lambda group: fastlane.serve_calls(
                [fastlane.Call("bundle", str(sid), prefix, digest, None) for sid in group]
            ),
            [active[n : n + 8] for n in range(0, calls, 8)],
        ),
        "start": timed(lambda _: turns.session_started(actor=actor, data={"bundle": bundle_name}), list(range(calls))),
        "end": timed(
            lambda sid: session_end(session=session_get(session_id=sid, actor=actor), actor=actor),
            active[calls : calls * 2 + 1],
        ),
    }
    if draining is not None:  # the probe: a draining version that still has active sessions
        figures["drain"] = timed(lambda _: lifecycle.version_drain(version_id=draining.pk), list(range(calls)))
    figures.update(control_plane(bundle_name, actor, live, draining, calls))
    return figures


def control_plane(bundle_name: str, actor: Any, live: Any, draining: Any, calls: int) -> dict[str, dict[str, float]]:
    """The operations that counted every historic session before (issue 20): what ops and the
    admin call, each as its view calls it (the selector or service and the serializer)."""
    from access.actors import SYSTEM
    from adminui.views.sessions import drain_data as _drain_data
    from api.views.labels import LabelOut
    from api.views.versions import VersionOut
    from metrics.selectors import version_usage
    from registry import lifecycle, releases
    from registry.models import Bundle, Label
    from registry.selectors import version_get
    from registry.services import label_move, label_rollback
    from sessions_app.services import session_expire_lapsed
    from sessions_app.sweep import sessions_tally
    from skills.selectors import version_skill_metrics

    bundle = Bundle.objects.get(name=bundle_name)
    numbers = [live.number, draining.number]

    def label_put(n: int) -> None:  # PUT .../labels/production/ {"version": ...}: L, D, L, D ...
        target = version_get(bundle=bundle, number=numbers[n % 2])
        label, _ = label_move(bundle=bundle, name="production", version=target, actor=SYSTEM, reason="bench")
        _ = LabelOut(label).data

    def restore() -> None:  # production on the live version again, the other one draining
        label = Label.objects.get(bundle=bundle, name="production")
        if label.version_id != live.pk:
            label_move(bundle=bundle, name="production", version=live, actor=SYSTEM, reason="bench")

    figures = {
        "version GET": timed(
            lambda n: VersionOut(version_get(bundle=bundle, number=numbers[n % 2])).data, list(range(calls))
        ),
        "label PUT": timed(label_put, list(range(calls + 1))),
    }
    restore()
    figures["rollback"] = timed(
        lambda _: label_rollback(bundle=bundle, name="production", to_version=None, actor=SYSTEM, reason="bench"),
        list(range(calls + 1)),
    )
    restore()
    figures["revoke preview"] = timed(
        lambda n: lifecycle.version_revoke_preview(version=version_get(bundle=bundle, number=numbers[n % 2])),
        list(range(calls)),
    )
    figures["release dry run"] = timed(
        lambda _: releases.release_preview(
            moves=[releases.ReleaseMove(bundle, "production", [(draining, 100)])], actor=SYSTEM
        ),
        list(range(calls)),
    )
    figures["drain dashboard"] = timed(lambda _: _drain_data(None), list(range(calls)))
    figures["usage"] = timed(
        lambda _: version_usage(version=version_get(bundle=bundle, number=live.number)), list(range(calls))
    )
    figures["routing metrics"] = timed(lambda _: version_skill_metrics(version_id=live.pk), list(range(calls)))
    # The sweep's tally of active sessions: once a sweep, O(every active session), not a request.
    figures["sweep tally"] = timed(lambda _: sessions_tally(), list(range(max(3, calls // 10))))
    # One sweep batch of SWEEP_BATCH lapsed sessions (both databases hold the same number).
    figures["sweep batch"] = timed(
        lambda _: session_expire_lapsed(batch=SWEEP_BATCH, max_batches=1), list(range(calls))
    )
    return figures


SWEEP_BATCH = 100
# Rows that are not on a request path: O(active) by design, printed for their cost.
BACKGROUND = {"sweep tally"}


def time_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def plans(bundle_name: str, secret: str) -> dict[str, str]:
    """EXPLAIN (ANALYZE for reads) of the statements that must stay index probes."""
    from django.db import connection

    from registry.models import BundleVersion, VersionState
    from sessions_app.models import Session
    from sessions_app.selectors import key_session_statement, key_sessions_statement
    from sessions_app.services import expire_statement, renew_statement

    draining = BundleVersion.objects.filter(bundle__name=bundle_name, state=VersionState.DRAINING).first()
    session = Session.objects.active().filter(bundle__name=bundle_name).first()
    assert session is not None
    out = {}
    with connection.cursor() as cursor:

        def explain(sql: str, params: Any, analyze: bool = True) -> str:
            cursor.execute(f"EXPLAIN ({'ANALYZE, ' if analyze else ''}COSTS OFF) {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())

        if draining is not None:
            # The query `.exists()` runs (no ordering, LIMIT 1), as version_drain asks it.
            probe = Session.objects.active().pinned_to(draining).query.exists()
            sql, params = probe.get_compiler("default").as_sql()
            out["drain: any active session on the version?"] = explain(sql, params)
        out["fetch: key, session, version, bundle"] = explain(
            *key_session_statement(prefix=secret[:10], session_id=str(session.pk))
        )
        ids = [str(s.pk) for s in Session.objects.active().filter(bundle__name=bundle_name)[:8]]
        out["batched fetch: 8 keys, sessions, versions, bundles"] = explain(
            *key_sessions_statement(prefixes=[secret[:10]] * 8, session_ids=ids)
        )
        out["batched heartbeat: the UPDATE (not run)"] = explain(*renew_statement(session_ids=ids), analyze=False)
        out["end: the UPDATE (not run)"] = explain(
            "UPDATE sessions_app_session SET status = 'ended', ended_at = now() WHERE id = %s AND status = 'active'",
            [str(session.pk)],
            analyze=False,
        )
        out["sweep: one batch (not run)"] = explain(*expire_statement(now=time_now(), batch=1000), analyze=False)
    return out


def use_database(name: str) -> None:
    """Point Django's default connection at database `name` (it reconnects on next use)."""
    from django.db import connections

    connections["default"].close()
    connections["default"].settings_dict["NAME"] = name


def median_figures(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        op: {k: round(statistics.median(r[op][k] for r in rounds), 3) for k in ("median_ms", "p90_ms")}
        for op in rounds[0]
    }


def month(days: int, sessions_per_day: int, turns_per_session: int, retention_days: int) -> list[dict[str, Any]]:
    """A simulated month (or `days`) of load with the daily prune on: each day's sessions, turns,
    file reads, deliveries and audit events are seeded with that day's timestamps, then the
    prune runs as of the end of that day (then VACUUM, as autovacuum would between days) and the
    database size is read. Flat once `retention_days` have passed: each day deletes a day."""
    from datetime import timedelta

    from django.db import connection
    from django.test import override_settings
    from django.utils import timezone

    from retention.services import prune

    start = timezone.now() - timedelta(days=days)
    rows: list[dict[str, Any]] = []
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 0")
        cursor.execute("SELECT id, bundle_id FROM registry_bundleversion WHERE state = 'live' LIMIT 1")
        version_id, bundle_id = cursor.fetchone()
        cursor.execute("SELECT id FROM access_apikey LIMIT 1")
        key_id = cursor.fetchone()[0]
        cursor.execute("SELECT id FROM knowledge_pack LIMIT 1")
        pack = cursor.fetchone()
        cursor.execute("SELECT id FROM webhooks_endpoint LIMIT 1")
        endpoint = cursor.fetchone()
    retention = {f"RETENTION_{k}_DAYS": retention_days for k in ("SESSIONS", "TURNS", "FILE_READS", "DELIVERIES")}
    for day in range(days):
        base = start + timedelta(days=day)
        params = {"bundle": bundle_id, "version": version_id, "key": key_id, "base": base, "n": sessions_per_day}
        with connection.cursor() as cursor:
            cursor.execute(
                """INSERT INTO sessions_app_session (id, bundle_id, version_id, label, api_key_id, status, ttl_seconds,
                       started_at, last_seen_at, expires_at, ended_at, variables)
                   SELECT {uuid_t}, %(bundle)s, %(version)s, 'production', %(key)s, 'ended', 1800, t, t,
                       t + interval '30 minutes', t + interval '10 minutes', '{{}}'::jsonb
                   FROM (SELECT %(base)s + i * (interval '1 day' / %(n)s) AS t FROM generate_series(1, %(n)s) i) g
                   RETURNING id""".format(uuid_t=uuid7_sql("t")),
                params,
            )
            ids = [r[0] for r in cursor.fetchall()]
            cursor.execute(
                """INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills,
                       invoked, latency_us, created_at, reported_at)
                   SELECT s, %(version)s, n, '["greet"]', '["refund_order"]', '[]', '["refund_order"]', 300,
                       %(base)s, %(base)s
                   FROM unnest(%(ids)s::uuid[]) AS s CROSS JOIN generate_series(1, %(turns)s) AS n""",
                {**params, "ids": ids, "turns": turns_per_session},
            )
            if pack:
                cursor.execute(
                    """INSERT INTO knowledge_fileread (session_id, pack_id, path, known_sha256, read_at)
                       SELECT s, %(pack)s, 'DUTY.md', repeat('a', 64), %(base)s FROM unnest(%(ids)s::uuid[]) AS s""",
                    {**params, "ids": ids, "pack": pack[0]},
                )
            if endpoint:
                cursor.execute(
                    """INSERT INTO webhooks_delivery (endpoint_id, event, message_id, payload, status, attempts,
                           response_status, latency_ms, error, created_at, delivered_at)
                       SELECT %(endpoint)s, 'session.expired', 'msg_month_' || %(day)s || '_' || i, '{}', 'succeeded',
                           1, 200, 20, '', %(base)s, %(base)s FROM generate_series(1, %(n)s / 100) AS i""",
                    {**params, "endpoint": endpoint[0], "day": day},
                )
        started = time.perf_counter()
        with override_settings(**retention):
            results = prune(now=base + timedelta(days=1))
        prune_s = time.perf_counter() - started
        with connection.cursor() as cursor:
            for table in ("sessions_app_session", "skills_skillturn", "knowledge_fileread", "webhooks_delivery"):
                cursor.execute(f"VACUUM {table}")
            cursor.execute("SELECT pg_database_size(current_database())")
            size = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM sessions_app_session WHERE version_id = %s", [version_id])
            kept = cursor.fetchone()[0]
        batch_ms = [ms for r in results for ms in r.batch_ms]
        rows.append(
            {
                "day": day + 1,
                "size_mb": round(size / 2**20, 1),
                "sessions_kept": kept,
                "deleted": sum(r.rows for r in results),
                "prune_s": round(prune_s, 2),
                "batch_median_ms": round(statistics.median(batch_ms), 1) if batch_ms else 0.0,
                "batch_max_ms": round(max(batch_ms), 1) if batch_ms else 0.0,
            }
        )
        print(f"  day {day + 1}: {rows[-1]}", flush=True)
    return rows


def rekey(url: str, bundle_name: str, lapsed: int, active: int) -> str:
    """--reuse: a new secret for the seeded agent key (a seed prints its secret once), the live
    version's active sessions topped up to `active` (a previous run's ends and sweeps used some),
    and `lapsed` of them lapsed again (the sweep measured them)."""
    import hashlib

    import psycopg

    secret = "pr_" + secrets.token_urlsafe(32)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE access_apikey SET prefix = %s, secret_hash = %s WHERE name = %s",
            [secret[:10], hashlib.sha256(secret.encode()).hexdigest(), f"{bundle_name}-agent"],
        )
        conn.execute("SET statement_timeout = 0")
        # The seed's leases ran out meanwhile: renew them all, then lapse `lapsed` again.
        conn.execute("UPDATE sessions_app_session SET expires_at = now() + interval '2 hours' WHERE status = 'active'")
        # Databases seeded before session ids were time-ordered (core/ids.py): the active
        # sessions get the ids session_start would have given them (none of them has turns,
        # file reads or cards; the ended ones keep theirs).
        conn.execute(
            f"""UPDATE sessions_app_session s SET id = {uuid7_sql("s.started_at")}
                WHERE s.status = 'active' AND substr(s.id::text, 15, 1) <> '7'
                  AND NOT EXISTS (SELECT 1 FROM skills_skillturn t WHERE t.session_id = s.id)
                  AND NOT EXISTS (SELECT 1 FROM skills_sessionskill c WHERE c.session_id = s.id)
                  AND NOT EXISTS (SELECT 1 FROM knowledge_fileread f WHERE f.session_id = s.id)"""
        )
        # As bench/seed_scale.py inserts them: on the live version, through production, the seeded key.
        conn.execute(
            """INSERT INTO sessions_app_session (id, bundle_id, version_id, label, api_key_id, status, ttl_seconds,
                   started_at, last_seen_at, expires_at, ended_at, variables)
               SELECT {uuid_now}, v.bundle_id, v.id, 'production', k.id, 'active', 1800, now(), now(),
                   now() + interval '2 hours', NULL, '{}'::jsonb
               FROM registry_bundleversion v JOIN registry_bundle b ON b.id = v.bundle_id
               JOIN access_apikey k ON k.name = b.name || '-agent',
                   generate_series(1, GREATEST(0, %s - (SELECT count(*) FROM sessions_app_session s
                       WHERE s.status = 'active' AND s.version_id = v.id)))
               WHERE b.name = %s AND v.state = 'live'""".replace("{uuid_now}", uuid7_sql("now()")),
            [active - active // 10, bundle_name],
        )
        conn.execute(
            """UPDATE sessions_app_session SET expires_at = now() - interval '1 minute' WHERE id = ANY(ARRAY(
                   SELECT s.id FROM sessions_app_session s JOIN registry_bundleversion v ON v.id = s.version_id
                   WHERE s.status = 'active' AND v.state = 'live' AND s.expires_at > now() + interval '1 minute'
                   ORDER BY s.id LIMIT %s))""",
            [lapsed],
        )
        conn.execute("ANALYZE")  # a seed cut short may not have reached its own ANALYZE
    return secret


def print_table(
    ns: Any,
    sizes: dict[str, int],
    seed_seconds: float,
    active: str,
    lapsed: int,
    empty: dict[str, dict[str, float]],
    large: dict[str, dict[str, float]],
) -> None:
    print(
        f"\nlarge database ({sizes['large'] / 2**30:.1f} GiB): {ns.versions} versions, {ns.ended} ended sessions"
        f" with {ns.turns_per_session} turns and one file read each, {ns.deliveries} deliveries, {active} active,"
        f" {lapsed} lapsed sessions, seeded in {seed_seconds:.0f} s. {ns.calls} timed calls per operation and"
        f" round, {ns.rounds} interleaved rounds, in process; p50 (p90) ms; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'operation':<18} {'empty db':>16} {'large db':>16} {'ratio':>7}")
    for op, small_figure in empty.items():
        big_figure = large[op]
        ratio = big_figure["median_ms"] / small_figure["median_ms"]
        print(
            f"{op:<18} {small_figure['median_ms']:>7.2f} ({small_figure['p90_ms']:>6.2f})"
            f" {big_figure['median_ms']:>7.2f} ({big_figure['p90_ms']:>6.2f}) {ratio:>7.2f}"
            + ("  once a sweep, not a request" if op in BACKGROUND else "" if ratio <= 1.2 else "  > 1.2")
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--ended", type=int, default=5_000_000)
    parser.add_argument("--turns-per-session", type=int, default=4, help="skill turns per ended session (default 4)")
    parser.add_argument("--deliveries", type=int, default=1_000_000)
    parser.add_argument("--active", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per operation and round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, medians reported (default 3)")
    parser.add_argument("--month-days", type=int, default=45, help="days of the simulated month (0: skip it)")
    parser.add_argument(
        "--month-sessions", type=int, default=43_000, help="sessions per simulated day (default: 1/100 of 4.3 M)"
    )
    parser.add_argument("--month-retention", type=int, default=30, help="retention days in the simulation")
    parser.add_argument("--month-only", action="store_true", help="only the simulated month")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure the empty and large databases a previous run seeded (a new secret for the seeded key,"
        " the lapsed sessions lapsed again) instead of seeding them again",
    )
    ns = parser.parse_args()

    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    os.environ.setdefault("API_THROTTLE_READ", "100000000/m")
    os.environ.setdefault("API_THROTTLE_WRITE", "100000000/m")
    # Seeding inserts millions of rows per statement: no statement timeout (and so no client-side
    # cap after it, config.postgres) in this process and the commands it runs.
    os.environ["DB_STATEMENT_TIMEOUT_MS"] = "0"
    handles = start_services("scale")
    django_ready = False
    sizes: dict[str, int] = {}
    empty: dict[str, dict[str, float]] = {}
    large: dict[str, dict[str, float]] = {}
    explained: dict[str, str] = {}
    lapsed = SWEEP_BATCH * (ns.calls + 1) * ns.rounds
    try:
        import psycopg

        parts = urlsplit(os.environ["DATABASE_URL"])
        base_name = parts.path.lstrip("/") or "registry"
        base_name = "registry_scale" if base_name == "registry" else f"{base_name}_scale"
        # Two databases on one server: an almost empty one and the large one, measured in
        # interleaved rounds so that the machine's load drifts over both alike; a third for the
        # simulated month.
        names = {"empty": f"{base_name}_empty", "large": f"{base_name}_large", "month": f"{base_name}_month"}
        secrets_of = {}
        active = str(max(ns.active, ns.calls * 3 * ns.rounds))
        seed_args = {
            "empty": ["--versions", "3", "--ended", "0", "--active", active, "--lapsed", str(lapsed)],
            "large": [
                "--versions",
                str(ns.versions),
                "--ended",
                str(ns.ended),
                "--active",
                active,
                "--lapsed",
                str(lapsed),
                "--turns-per-session",
                str(ns.turns_per_session),
                "--file-reads",
                "--deliveries",
                str(ns.deliveries),
            ],
            "month": ["--versions", "3", "--ended", "0", "--active", "10", "--file-reads", "--deliveries", "1"],
        }
        if not ns.month_days:
            del names["month"]
        if ns.month_only:
            names = {"month": names["month"]}
        seed_seconds = 0.0
        fresh = {k: v for k, v in names.items() if not (ns.reuse and k != "month")}
        with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
            for name in fresh.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
        for which in set(names) - set(fresh):
            os.environ["DATABASE_URL"] = parts._replace(path=f"/{names[which]}").geturl()
            python("manage.py", "migrate", "--no-input", "-v", "0")  # what landed since the seed
            secrets_of[which] = rekey(parts._replace(path=f"/{names[which]}").geturl(), which, lapsed, int(active))
        for which, name in fresh.items():
            os.environ["DATABASE_URL"] = parts._replace(path=f"/{name}").geturl()
            print(f"database {name}: migrating and seeding {' '.join(seed_args[which])} ...", flush=True)
            python("manage.py", "migrate", "--no-input", "-v", "0")
            started = time.perf_counter()
            seeded = python("bench/seed_scale.py", "--bundle", which, *seed_args[which])
            secrets_of[which] = seeded.strip().splitlines()[-1]
            if which == "large":
                seed_seconds = time.perf_counter() - started
                print(f"  seeded in {seed_seconds:.0f} s", flush=True)

        import django

        django.setup()
        django_ready = True
        from django.db import connection

        for which in () if ns.month_only else ("empty", "large"):
            use_database(names[which])
            with connection.cursor() as cursor:
                # What autovacuum keeps a production table at (it is off on some development
                # servers, this machine's among them): without it every lease renewal, end and
                # expiry of the seed and of earlier rounds stays in the partial indexes of active
                # sessions until a scan meets it. Both databases alike.
                cursor.execute("VACUUM (ANALYZE) sessions_app_session, registry_bundleversion, registry_label")
        for which in () if ns.month_only else ("empty", "large"):
            use_database(names[which])
            with connection.cursor() as cursor:
                # The vacuum dirtied the pages it marked: write them out now rather than during
                # the timed rounds (superuser or pg_checkpoint; skipped where not allowed).
                with contextlib.suppress(Exception):
                    cursor.execute("CHECKPOINT")
                cursor.execute("SELECT pg_database_size(current_database())")
                sizes[which] = cursor.fetchone()[0]
                counts = {}
                for table in ("sessions_app_session", "skills_skillturn", "knowledge_fileread", "webhooks_delivery"):
                    cursor.execute(f"SELECT count(*) FROM {table}")
                    counts[table] = cursor.fetchone()[0]
            print(f"{which}: {sizes[which] / 2**30:.2f} GiB, {counts}", flush=True)
        rounds: dict[str, list[dict[str, dict[str, float]]]] = {"empty": [], "large": []}
        for n in range(0 if ns.month_only else ns.rounds):
            for which in ("empty", "large"):
                print(f"round {n + 1}/{ns.rounds}: {which} ...", flush=True)
                use_database(names[which])
                rounds[which].append(measure(which, secrets_of[which], ns.calls))
        if not ns.month_only:
            empty, large = median_figures(rounds["empty"]), median_figures(rounds["large"])
            use_database(names["large"])
            explained = plans("large", secrets_of["large"])
            # The table first: the month that follows takes a while.
            print_table(ns, sizes, seed_seconds, active, lapsed, empty, large)
        month_rows: list[dict[str, Any]] = []
        if ns.month_days:
            print(f"simulated month: {ns.month_days} days of {ns.month_sessions} sessions ...", flush=True)
            use_database(names["month"])
            month_rows = month(ns.month_days, ns.month_sessions, ns.turns_per_session * 5, ns.month_retention)
    finally:
        if django_ready:
            from django.db import connections

            connections.close_all()
        stop_services(handles)

    if month_rows:
        print(
            f"\nsimulated {len(month_rows)} days of {ns.month_sessions} sessions a day ({ns.turns_per_session * 5}"
            f" turns, one file read each, a delivery per 100), retention {ns.month_retention} days, prune daily:"
        )
        print(
            f"{'day':>4} {'db MB':>8} {'sessions kept':>14} {'deleted':>9} {'prune s':>8} {'batch p50 ms':>13}"
            f" {'max batch ms':>13}"
        )
        for row in month_rows:
            print(
                f"{row['day']:>4} {row['size_mb']:>8} {row['sessions_kept']:>14} {row['deleted']:>9}"
                f" {row['prune_s']:>8} {row['batch_median_ms']:>13} {row['batch_max_ms']:>13}"
            )
    for title, plan in explained.items():
        print(f"\n-- {title}\n{plan}")
    line = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kind": "scale",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "data": {
            "versions": ns.versions,
            "ended": ns.ended,
            "turns_per_session": ns.turns_per_session,
            "deliveries": ns.deliveries,
            "active": active,
            "lapsed": lapsed,
        },
        "seed_s": round(seed_seconds, 1),
        "rounds": ns.rounds,
        "empty": empty,
        "large": large,
        "month": month_rows,
        "load_average_end": round(os.getloadavg()[0], 2),
    }
    with RESULTS_LOG.open("a") as out:
        out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
