"""Does the hot path stay flat as the database grows? Measures fetch, start, end and the drain
probe on an almost empty database, then again after `manage.py seed_scale` has stored 10,000
versions, 1,000,000 ended and 100,000 active sessions, prints the ratio, the EXPLAIN plans of
the statements that must stay index probes, and times the sweep over 100,000 lapsed sessions
batch by batch (each batch is one short transaction: its time bounds how long any row lock is held).

    make bench-scale                                  # the full data set (a few minutes)
    make bench-scale ARGS="--ended 100000 --active 10000 --versions 1000 --lapsed 10000"

The operations are timed in process (the service functions and the fast lane's `serve`, each on
its own database round trips), not over HTTP: what grows with the data is the database work,
and in-process timings keep the server and wrk out of the noise. On the embedded PostgreSQL it
uses its own database (registry_scale, recreated); with DATABASE_URL it creates and drops
`<that database>_scale` on the same server. Appends a JSON line to bench/results.jsonl."""

import argparse
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

from devtools.stack import start_services, stop_services  # noqa: E402

BIN = Path(sys.executable).parent
RESULTS_LOG = ROOT / "bench" / "results.jsonl"


def manage(*args: str) -> str:
    done = subprocess.run(
        [str(BIN / "python"), "manage.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
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
    from registry import lifecycle
    from registry.models import BundleVersion, VersionState
    from sessions_app.models import Session
    from sessions_app.selectors import session_get
    from sessions_app.services import session_end

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
        "fetch": timed(lambda sid: fastlane.serve(kind="bundle", session_id=str(sid), headers=headers), active[:calls]),
        # The batched path (8 fetches per batch, as under load): time per batch.
        "fetch batch of 8": timed(
            lambda group: fastlane.serve_calls(
                [fastlane.Call("bundle", str(sid), prefix, digest, None) for sid in group]
            ),
            [active[n : n + 8] for n in range(0, calls, 8)],
        ),
        "start": timed(
            lambda _: fastlane.session_started(actor=actor, data={"bundle": bundle_name}), list(range(calls))
        ),
        "end": timed(
            lambda sid: session_end(session=session_get(session_id=sid, actor=actor), actor=actor),
            active[calls : calls * 2 + 1],
        ),
    }
    if draining is not None:  # the probe: a draining version that still has active sessions
        figures["drain"] = timed(lambda _: lifecycle.version_drain(version_id=draining.pk), list(range(calls)))
    return figures


def time_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def plans(bundle_name: str, secret: str) -> dict[str, str]:
    """EXPLAIN (ANALYZE for reads) of the statements that must stay index probes."""
    from django.db import connection

    from api.fastlane import _BATCH_SQL, _FETCH_SQL
    from registry.models import BundleVersion, VersionState
    from sessions_app.models import Session
    from sessions_app.services import _EXPIRE_SQL, _RENEW_SQL

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
        out["fetch: key, session, version, bundle"] = explain(_FETCH_SQL, [str(session.pk), secret[:10]])
        ids = [str(s.pk) for s in Session.objects.active().filter(bundle__name=bundle_name)[:8]]
        out["batched fetch: 8 keys, sessions, versions, bundles"] = explain(_BATCH_SQL, [[secret[:10]] * 8, ids])
        out["batched heartbeat: the UPDATE (not run)"] = explain(
            _RENEW_SQL, [ids, time_now(), time_now(), time_now()], analyze=False
        )
        out["end: the UPDATE (not run)"] = explain(
            "UPDATE sessions_app_session SET status = 'ended', ended_at = now() WHERE id = %s AND status = 'active'",
            [str(session.pk)],
            analyze=False,
        )
        out["sweep: one batch (not run)"] = explain(
            _EXPIRE_SQL.format(only=""), {"now": time_now(), "batch": 1000, "ids": []}, analyze=False
        )
    return out


def sweep(batch: int) -> dict[str, float]:
    from sessions_app.services import session_expire_lapsed

    times, total = [], 0
    while True:
        started = time.perf_counter()
        expired = session_expire_lapsed(batch=batch, max_batches=1)
        times.append((time.perf_counter() - started) * 1000)
        total += expired
        if expired < batch:
            break
    return {
        "expired": total,
        "batches": len(times),
        "total_s": round(sum(times) / 1000, 2),
        "batch_median_ms": round(statistics.median(times), 1),
        "batch_max_ms": round(max(times), 1),
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--ended", type=int, default=1_000_000)
    parser.add_argument("--active", type=int, default=100_000)
    parser.add_argument("--lapsed", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per operation and round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, medians reported (default 3)")
    parser.add_argument("--batch", type=int, default=1000, help="sweep batch size (default 1000)")
    ns = parser.parse_args()

    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    os.environ.setdefault("API_THROTTLE_READ", "100000000/m")
    os.environ.setdefault("API_THROTTLE_WRITE", "100000000/m")
    handles = start_services("scale")
    django_ready = False
    try:
        import psycopg

        parts = urlsplit(os.environ["DATABASE_URL"])
        base_name = parts.path.lstrip("/") or "registry"
        base_name = "registry_scale" if base_name == "registry" else f"{base_name}_scale"
        # Two databases on one server: an almost empty one and the large one, measured in
        # interleaved rounds so that the machine's load drifts over both alike.
        names = {"empty": f"{base_name}_empty", "large": f"{base_name}_large"}
        secrets_of = {}
        seed_args = {
            "empty": ["--versions", "3", "--ended", "0", "--active", str(ns.calls * 3 * ns.rounds)],
            "large": [
                "--versions",
                str(ns.versions),
                "--ended",
                str(ns.ended),
                "--active",
                str(max(ns.active, ns.calls * 3 * ns.rounds)),
                "--lapsed",
                str(ns.lapsed),
            ],
        }
        seed_seconds = 0.0
        with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
            for name in names.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
        for which, name in names.items():
            os.environ["DATABASE_URL"] = parts._replace(path=f"/{name}").geturl()
            print(f"database {name}: migrating and seeding {' '.join(seed_args[which])} ...", flush=True)
            manage("migrate", "--no-input", "-v", "0")
            started = time.perf_counter()
            secrets_of[which] = manage("seed_scale", "--bundle", which, *seed_args[which]).strip().splitlines()[-1]
            if which == "large":
                seed_seconds = time.perf_counter() - started

        import django

        django.setup()
        django_ready = True
        rounds: dict[str, list[dict[str, dict[str, float]]]] = {"empty": [], "large": []}
        for n in range(ns.rounds):
            for which in ("empty", "large"):
                print(f"round {n + 1}/{ns.rounds}: {which} ...", flush=True)
                use_database(names[which])
                rounds[which].append(measure(which, secrets_of[which], ns.calls))
        empty, large = median_figures(rounds["empty"]), median_figures(rounds["large"])
        use_database(names["large"])
        explained = plans("large", secrets_of["large"])
        print(f"sweeping {ns.lapsed} lapsed sessions ...", flush=True)
        swept = sweep(ns.batch)
    finally:
        if django_ready:
            from django.db import connections

            connections.close_all()
        stop_services(handles)

    print(
        f"\nlarge database: {ns.versions} versions, {ns.ended} ended, {ns.active} active, {ns.lapsed} lapsed sessions,"
        f" seeded in {seed_seconds:.0f} s. {ns.calls} timed calls per operation and round, {ns.rounds} interleaved"
        f" rounds, in process; median (p90) ms; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'operation':<10} {'empty db':>16} {'large db':>16} {'ratio':>7}")
    for op, small_figure in empty.items():
        big_figure = large[op]
        ratio = big_figure["median_ms"] / small_figure["median_ms"]
        print(
            f"{op:<10} {small_figure['median_ms']:>7.2f} ({small_figure['p90_ms']:>6.2f})"
            f" {big_figure['median_ms']:>7.2f} ({big_figure['p90_ms']:>6.2f}) {ratio:>7.2f}"
        )
    print(
        f"\nsweep of {swept['expired']} lapsed sessions: {swept['batches']} batches of {ns.batch} in"
        f" {swept['total_s']} s; per batch (the longest any row lock is held) median {swept['batch_median_ms']} ms,"
        f" max {swept['batch_max_ms']} ms"
    )
    for title, plan in explained.items():
        print(f"\n-- {title}\n{plan}")
    line = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kind": "scale",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "data": {"versions": ns.versions, "ended": ns.ended, "active": ns.active, "lapsed": ns.lapsed},
        "seed_s": round(seed_seconds, 1),
        "rounds": ns.rounds,
        "empty": empty,
        "large": large,
        "sweep": swept,
        "load_average_end": round(os.getloadavg()[0], 2),
    }
    with RESULTS_LOG.open("a") as out:
        out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
