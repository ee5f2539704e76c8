"""How the rollout guard behaves (issue 39; docs/operations.md#guarded-rollouts): simulated
rollouts of a bundle whose `production` label is split baseline / candidate, the candidate's
sessions resolving with a given probability, the guard looking every `--look` ended sessions.

    .venv/bin/python bench/guard_sim.py [--reps 1000] [--service-reps 4] [--life 20000]

Two paths, both ending in the worker's own decision:

* `judge`: the sessions' outcomes are drawn per look and added to the arms' totals in memory;
  each look calls `evidence.rollouts.judge` (what `guard_judge` calls on the rollups). Fast, so
  it runs enough rollouts (`--reps`) for a rate: the A/A false-halt rate with its 95 % interval.
* `services`: every session through the services in process (not HTTP): `session_start` on the
  split label (the real rollout arithmetic assigns the arm), `session_end_outcome`, and each look
  `evidence.rollouts.guards_judge` (the worker task's body) on the real rollups, which halts
  with a real label move. Slower: `--service-reps` rollouts per scenario, in the database
  DATABASE_URL names (a database `registry_guard_sim` on that server, recreated; `--database`).

Scenarios: A/A (equal arms, the whole life: every halt is a false halt; goal <= 5 %), A/B (the
candidate 5 points worse from the start), drift (the candidate degrades linearly to 5 points
worse over the life). Figures: halts, the sessions (all arms) until the halt, and the share of
them the candidate served, at `--traffic` % for the candidate. The guard: outcome.resolved,
tolerance `--tolerance`, `--min-sessions` per arm, rollback."""

import argparse
import math
import os
import random
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


@dataclass
class Result:
    halted: bool
    sessions: int  # sessions started (both arms) until the halt, or the whole life
    candidate: int  # of them, the candidate's


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
    from django.conf import settings

    settings.USAGE_FLUSH_THREAD = False


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


def judge_run(scenario: str, ns: argparse.Namespace, rng: random.Random) -> Result:
    """One rollout through evidence.rollouts.judge on in-memory totals."""
    from evidence.rollouts import judge
    from evidence.selectors import Totals

    guard = spec(ns)
    arms = {"a": [0, 0], "b": [0, 0]}  # [sessions, resolved]
    done = 0
    while done < ns.life:
        for _ in range(ns.look):
            arm = "b" if rng.random() * 100 < ns.traffic else "a"
            p = ns.base if arm == "a" else p_candidate(scenario, ns.base, ns.drop, done, ns.life)
            arms[arm][0] += 1
            arms[arm][1] += rng.random() < p
            done += 1
        a = Totals(sums={"outcomes": arms["a"][0], "resolved": arms["a"][1]})
        b = Totals(sums={"outcomes": arms["b"][0], "resolved": arms["b"][1]})
        if any(j.verdict == "worse" for j in judge(guard, a, b)):
            return Result(True, done, arms["b"][0])
    return Result(False, done, arms["b"][0])


def service_run(scenario: str, ns: argparse.Namespace, rng: random.Random, n: int, life: int) -> Result:
    """One rollout through the services and the worker task's body, on the real rollups."""
    from access.actors import SYSTEM
    from access.models import Role
    from access.services import api_key_create
    from evidence.models import GuardState, RolloutGuard
    from evidence.rollouts import guard_set, guards_judge
    from evidence.services import OutcomeIn, session_end_outcome
    from registry.services import bundle_create, label_move, version_publish
    from sessions_app.services import session_start

    ops = api_key_create(name=f"sim-ops-{n}", role=Role.OPS, actor=SYSTEM)[0].as_actor()
    agent = api_key_create(name=f"sim-agent-{n}", role=Role.AGENT, actor=SYSTEM)[0].as_actor()
    bundle = bundle_create(name=f"sim-{n}", actor=ops)
    doc = {"system_prompt": "Simulated.", "tools": []}
    v1 = version_publish(bundle=bundle, content=doc, message="v1", actor=ops).version
    v2 = version_publish(
        bundle=bundle, content={**doc, "system_prompt": "Simulated 2."}, message="v2", actor=ops
    ).version
    label_move(bundle=bundle, name="production", version=v1, actor=ops, reason="base")
    label_move(
        bundle=bundle, name="production", targets=[(v1, 100 - ns.traffic), (v2, ns.traffic)], actor=ops, reason="ramp"
    )
    guard_set(bundle=bundle, label_name="production", spec=spec(ns), actor=ops, reason="sim")
    done = candidate = 0
    while done < life:
        for _ in range(ns.look):
            session, _ = session_start(bundle=bundle, actor=agent, routing_key=f"u{n}-{done}")
            is_b = session.version_id == v2.pk
            candidate += is_b
            p = p_candidate(scenario, ns.base, ns.drop, done, life) if is_b else ns.base
            status = "resolved" if rng.random() < p else "failed"
            session_end_outcome(session=session, actor=agent, outcome=OutcomeIn(status=status, reason=""))
            done += 1
        guards_judge()
        if RolloutGuard.objects.get(label__bundle=bundle).state == GuardState.ROLLED_BACK:
            return Result(True, done, candidate)
    return Result(False, done, candidate)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=1000, help="rollouts per scenario through judge")
    parser.add_argument("--service-reps", type=int, default=4, help="rollouts per scenario through the services")
    parser.add_argument("--life", type=int, default=20000, help="sessions over a rollout's whole life")
    parser.add_argument("--look", type=int, default=50, help="ended sessions between two looks")
    parser.add_argument("--traffic", type=int, default=10, help="the candidate's weight, %%")
    parser.add_argument("--base", type=float, default=0.80, help="the baseline's resolved share")
    parser.add_argument("--drop", type=float, default=0.05, help="the A/B and drift regression")
    parser.add_argument("--tolerance", type=float, default=0.0)
    parser.add_argument("--min-sessions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--service-scenarios", default="A/A,A/B,drift", help="comma-separated")
    parser.add_argument("--service-life", type=int, default=0, help="the services path's life (default --life)")
    parser.add_argument("--database", default="registry_guard_sim", help="recreated on DATABASE_URL's server")
    ns = parser.parse_args(argv)
    setup_django(database=ns.service_reps > 0, name=ns.database)
    print(
        f"life {ns.life:,} sessions, a look every {ns.look} ({ns.life // ns.look} looks), candidate at "
        f"{ns.traffic} %, baseline resolves {ns.base:.0%}, regression {100 * ns.drop:.0f} points, tolerance "
        f"{100 * ns.tolerance:.0f} points, min {ns.min_sessions} per arm"
    )
    print()
    print(
        "| path | scenario | rollouts halted (95 % interval) | sessions until the halt (median) "
        "| candidate sessions until the halt (median) | candidate's share until the halt |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    rng = random.Random(ns.seed)
    for scenario in ("A/A", "A/B", "drift") if ns.reps else ():
        started = time.perf_counter()
        results = [judge_run(scenario, ns, rng) for _ in range(ns.reps)]
        print(row(f"judge x{ns.reps}", scenario, results), flush=True)
        print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if ns.service_reps:
        for i, scenario in enumerate(ns.service_scenarios.split(",")):
            started = time.perf_counter()
            life = ns.service_life or ns.life
            results = [service_run(scenario, ns, rng, 1000 * i + k, life) for k in range(ns.service_reps)]
            print(row(f"services x{ns.service_reps}", scenario, results), flush=True)
            print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
