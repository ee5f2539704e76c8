"""How the rollout guard behaves (issue 39; docs/operations.md#guarded-rollouts): simulated
rollouts of a bundle whose `production` label is split baseline / candidate, the candidate's
sessions resolving with a given probability, the guard looking every `--look` ended sessions.

    .venv/bin/python bench/guard_sim.py [--reps 500] [--check 2] [--service-seconds 600 --workers 4]

Rollout k of a scenario is a fixed random stream (`stream`): session i has the routing key
`u<i>`, its arm is what the real routing arithmetic (registry.lifecycle.versions) gives that
key on the split, and one draw of the stream decides its outcome. Two paths consume it, both
ending in the worker's own decision:

* `judge`: the outcomes are added to the arms' totals in memory; each look calls
  `evidence.rollouts.judge` (what the worker's `guard_judge` calls on the rollups). Fast, so it
  runs enough rollouts (`--reps`) for a rate: the A/A false-halt rate with its 95 % interval.
* `services`: every session through the services in process (not HTTP): `session_start` on the
  split label (which assigns the arm), `session_end_outcome` (the end with its outcome, which
  adds to the rollup), and each look the worker task's body for this guard (`counts.flush`, then
  `evidence.rollouts.guard_judge` on the real rollups), which halts with a real label move.
  Rollouts run `--workers` at a time (threads, each its own connection and bundle), in the
  database DATABASE_URL names (a database `registry_guard_sim` on that server, recreated;
  `--database`).

`--check N` runs rollouts 0..N-1 of every scenario on both paths and compares them look by
look (every judged metric's n, difference, interval and verdict, and where it halted): equal
decisions on the same streams are what make the `judge` rows the code's figures.

Scenarios: A/A (equal arms, the whole life: every halt is a false halt; goal <= 5 %), A/B (the
candidate 5 points worse from the start), drift (the candidate degrades linearly to 5 points
worse over the life). Figures: halts, the sessions (all arms) until the halt, and the share of
them the candidate served, at `--traffic` % for the candidate. The guard: outcome.resolved,
tolerance `--tolerance`, `--min-sessions` per arm, rollback."""

import argparse
import itertools
import math
import os
import random
import secrets
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SLUGS = {"A/A": "aa", "A/B": "ab", "drift": "drift"}
LABEL = "production"


@dataclass
class Result:
    halted: bool
    sessions: int  # sessions started (both arms) until the halt, or the whole life
    candidate: int  # of them, the candidate's
    # Per look, the judged metrics (MetricJudgement.out()): what --check compares path to path.
    trace: list[Any] = field(default_factory=list, compare=False)


def stream(ns: argparse.Namespace, scenario: str, k: int) -> tuple[str, random.Random]:
    """Rollout k of a scenario: its bundle's name (part of the routing hash) and the stream of
    its outcome draws, one per session in order, drawn after the session's arm is known."""
    return f"sim-{SLUGS[scenario]}-{k}", random.Random(f"{ns.seed}/{scenario}/{k}")


def setup_django(database: bool, name: str = "registry_guard_sim") -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:9/0")
    if database:
        from pinned_fetch import manage, recreate_database

        url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()
        os.environ["DATABASE_URL"] = url
        recreate_database(url)
        manage("migrate", "--no-input", "-v", "0")
    else:
        os.environ.setdefault("DATABASE_URL", "postgres://sim@127.0.0.1:9/sim")
    import django

    django.setup()
    import logging

    from django.conf import settings

    settings.USAGE_FLUSH_THREAD = False
    logging.getLogger("registry.events").setLevel(logging.WARNING)  # a line per label move


def p_candidate(scenario: str, base: float, drop: float, done: int, life: int) -> float:
    if scenario == "A/A":
        return base
    if scenario == "A/B":
        return base - drop
    return base - drop * min(1.0, done / life)  # drift


def spec(ns: argparse.Namespace) -> dict[str, Any]:
    return {
        "metrics": [{"name": "outcome.resolved", "tolerance": ns.tolerance, "relative": False, "better": "higher"}],
        "min_sessions": ns.min_sessions,
        "action": "rollback",
    }


def judge_run(scenario: str, ns: argparse.Namespace, k: int, life: int, trace: bool = False) -> Result:
    """Rollout k through evidence.rollouts.judge on in-memory totals."""
    from evidence.rollouts import judge
    from evidence.selectors import Totals
    from registry.lifecycle.versions import routing_bucket

    name, rng = stream(ns, scenario, k)
    guard, cut = spec(ns), 100 - ns.traffic  # buckets [cut, 100) are the candidate's slice
    arms = {False: [0, 0], True: [0, 0]}  # candidate? -> [sessions, resolved]
    done, looks = 0, []
    while done < life:
        for _ in range(ns.look):
            is_b = routing_bucket(bundle_name=name, label_name=LABEL, routing_key=f"u{done}") >= cut
            p = p_candidate(scenario, ns.base, ns.drop, done, life) if is_b else ns.base
            arms[is_b][0] += 1
            arms[is_b][1] += rng.random() < p
            done += 1
        a = Totals(sums={"outcomes": arms[False][0], "resolved": arms[False][1]})
        b = Totals(sums={"outcomes": arms[True][0], "resolved": arms[True][1]})
        judged = judge(guard, a, b)
        if trace:
            looks.append([j.out() for j in judged])
        if any(j.verdict == "worse" for j in judged):
            return Result(True, done, arms[True][0], looks)
    return Result(False, done, arms[True][0], looks)


def service_run(scenario: str, ns: argparse.Namespace, k: int, life: int, trace: bool = False) -> Result:
    """Rollout k through the services and the worker's judgement of its guard, on the real
    rollups; the label is really rolled back when the guard halts."""
    from django.db import connection

    from access.actors import SYSTEM
    from access.models import Role
    from access.services import api_key_create
    from evidence import counts
    from evidence.models import GuardState, RolloutGuard
    from evidence.rollouts import guard_judge, guard_set
    from evidence.services import OutcomeIn, session_end_outcome
    from registry.models import Label
    from registry.services import bundle_create, label_move, version_publish
    from sessions_app.services import session_start

    name, rng = stream(ns, scenario, k)
    ops = api_key_create(name=f"{name}-ops", role=Role.OPS, actor=SYSTEM)[0].as_actor()
    agent = api_key_create(name=f"{name}-agent", role=Role.AGENT, actor=SYSTEM)[0].as_actor()
    bundle = bundle_create(name=name, actor=ops)
    doc = {"system_prompt": "Simulated.", "tools": []}
    v1 = version_publish(bundle=bundle, content=doc, message="v1", actor=ops).version
    v2 = version_publish(
        bundle=bundle, content={**doc, "system_prompt": "Simulated 2."}, message="v2", actor=ops
    ).version
    label_move(bundle=bundle, name=LABEL, version=v1, actor=ops, reason="base")
    label_move(bundle=bundle, name=LABEL, targets=[(v1, 100 - ns.traffic), (v2, ns.traffic)], actor=ops, reason="ramp")
    guard = guard_set(bundle=bundle, label_name=LABEL, spec=spec(ns), actor=ops, reason="sim")
    done = candidate = 0
    looks: list[Any] = []
    try:
        while done < life:
            for _ in range(ns.look):
                session, _ = session_start(bundle=bundle, actor=agent, routing_key=f"u{done}")
                is_b = session.version_id == v2.pk
                candidate += is_b
                p = p_candidate(scenario, ns.base, ns.drop, done, life) if is_b else ns.base
                status = "resolved" if rng.random() < p else "failed"
                session_end_outcome(session=session, actor=agent, outcome=OutcomeIn(status=status, reason=""))
                done += 1
            counts.flush()  # what guards_judge does first, then guard_judge for each guard
            verdict = guard_judge(guard_id=guard.pk)
            if verdict is None:
                raise RuntimeError(f"{name}: the guard was not judged")
            if trace:
                looks.append(verdict["metrics"])
            if RolloutGuard.objects.get(pk=guard.pk).state == GuardState.ROLLED_BACK:
                targets = Label.objects.get(bundle=bundle, name=LABEL).targets
                assert {t["version_id"]: t["weight"] for t in targets}.get(v2.pk, 0) == 0, targets
                return Result(True, done, candidate, looks)
        return Result(False, done, candidate, looks)
    finally:
        connection.close()  # a worker thread's own connection


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def row(path: str, scenario: str, results: list[Result]) -> str:
    halts = [r for r in results if r.halted]
    lo, hi = wilson(len(halts), len(results))
    rate = f"{len(halts)}/{len(results)} = {100 * len(halts) / len(results):.1f} % ({100 * lo:.1f}-{100 * hi:.1f})"
    if halts:
        sessions = statistics.median(r.sessions for r in halts)
        cand = statistics.median(r.candidate for r in halts)
        share = f"{100 * sum(r.candidate for r in halts) / sum(r.sessions for r in halts):.1f} %"
        return f"| {path} | {scenario} | {rate} | {sessions:,.0f} | {cand:,.0f} | {share} |"
    return f"| {path} | {scenario} | {rate} | - | - | - |"


def same_decisions(model: Result, real: Result) -> bool:
    """The same halt (or none) after the same sessions, and the same judgement at every look."""
    return model == real and model.trace == real.trace


def check(ns: argparse.Namespace, life: int) -> bool:
    """Rollouts 0..check-1 of every scenario on both paths: the same decisions at every look?"""
    same = True
    for scenario in SLUGS:
        for k in range(ns.check):
            started = time.perf_counter()
            model = judge_run(scenario, ns, k, life, trace=True)
            real = service_run(scenario, ns, k, life, trace=True)
            equal = same_decisions(model, real)
            same = same and equal
            seconds = time.perf_counter() - started
            print(
                f"check {scenario} #{k}: {'same' if equal else 'DIFFERENT'} decisions at all {len(real.trace)} looks "
                f"(judge {model.halted}/{model.sessions}, services {real.halted}/{real.sessions}; {seconds:.0f} s)",
                flush=True,
            )
            if not equal:
                first = next((i for i, (m, r) in enumerate(zip(model.trace, real.trace, strict=False)) if m != r), None)
                if first is not None:
                    print(f"  look {first}: judge {model.trace[first]} services {real.trace[first]}")
    return same


def services_for(
    ns: argparse.Namespace, scenario: str, life: int, first: int
) -> tuple[list[tuple[int, Result]], float]:
    """Rollouts first, first+1, ... of `scenario` through the services, `--workers` at a time,
    until `--service-reps` are done or `--service-seconds` have passed (none starts after)."""
    numbers = itertools.count(first)
    lock = threading.Lock()
    done: list[tuple[int, Result]] = []
    started = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                k = next(numbers)
                if k - first >= ns.service_reps or time.perf_counter() - started > ns.service_seconds:
                    return
            result = service_run(scenario, ns, k, life, trace=True)
            with lock:
                done.append((k, result))

    threads = [threading.Thread(target=worker, name=f"sim-{i}") for i in range(ns.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(done, key=lambda kr: kr[0]), time.perf_counter() - started


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=500, help="rollouts per scenario through judge")
    parser.add_argument("--check", type=int, default=0, help="rollouts per scenario run on both paths and compared")
    parser.add_argument("--service-reps", type=int, default=0, help="at most this many rollouts through the services")
    parser.add_argument("--service-seconds", type=float, default=600, help="start no services rollout after this")
    parser.add_argument("--service-first", type=int, default=0, help="the services rollouts' first stream number")
    parser.add_argument("--workers", type=int, default=4, help="services rollouts at a time (threads)")
    parser.add_argument("--life", type=int, default=20000, help="sessions over a rollout's whole life")
    parser.add_argument("--look", type=int, default=50, help="ended sessions between two looks")
    parser.add_argument("--traffic", type=int, default=10, help="the candidate's weight, %%")
    parser.add_argument("--base", type=float, default=0.80, help="the baseline's resolved share")
    parser.add_argument("--drop", type=float, default=0.05, help="the A/B and drift regression")
    parser.add_argument("--tolerance", type=float, default=0.0)
    parser.add_argument("--min-sessions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--service-scenarios", default="A/A", help="comma-separated")
    parser.add_argument("--service-life", type=int, default=0, help="the services path's life (default --life)")
    parser.add_argument("--database", default="registry_guard_sim", help="recreated on DATABASE_URL's server")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    setup_django(database=bool(ns.service_reps or ns.check), name=ns.database)
    life = ns.service_life or ns.life
    print(
        f"life {ns.life:,} sessions, a look every {ns.look} ({ns.life // ns.look} looks), candidate at "
        f"{ns.traffic} %, baseline resolves {ns.base:.0%}, regression {100 * ns.drop:.0f} points, tolerance "
        f"{100 * ns.tolerance:.0f} points, min {ns.min_sessions} per arm"
    )
    if ns.check and not check(ns, life):
        print("the paths took different decisions")
        return 1
    print()
    print(
        "| path | scenario | rollouts halted (95 % interval) | sessions until the halt (median) "
        "| candidate sessions until the halt (median) | candidate's share until the halt |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for scenario in SLUGS if ns.reps else ():
        started = time.perf_counter()
        results = [judge_run(scenario, ns, k, ns.life) for k in range(ns.reps)]
        print(row(f"judge x{ns.reps}", scenario, results), flush=True)
        print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    for scenario in ns.service_scenarios.split(",") if ns.service_reps else ():
        first = ns.service_first + (ns.check if ns.check else 0)  # streams --check did not run on the services
        done, seconds = services_for(ns, scenario, life, first)
        if not done:
            continue
        sessions = sum(r.sessions for _, r in done)
        print(row(f"services x{len(done)}", scenario, [r for _, r in done]), flush=True)
        same = sum(same_decisions(judge_run(scenario, ns, k, life, trace=True), r) for k, r in done)
        print(
            f"  ({len(done)} rollouts, streams {done[0][0]}..{done[-1][0]}, {sessions:,} sessions in {seconds:.0f} s: "
            f"{sessions / seconds:.0f} sessions/s with {ns.workers} workers; the judge path on the same streams "
            f"takes the same decisions at every look in {same}/{len(done)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
