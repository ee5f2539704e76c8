"""The turn call against the code before a change, in the same run (issue 42).

Starts two web servers as `make run` does (python -m edge.serve: granian, WEB_CONCURRENCY
workers) on two ports, one from this tree ("new") and one from `--base`, a git worktree of the
commit to compare with ("old"; `git worktree add ../turn-base d8ab8e5 --detach`), on one
database and one Redis. Each server gets its own data made through its own API: the turn
scenario of bench/pinned_fetch.py (100 skills, one knowledge pack, a 20-message history with 8
tool results, `format: anthropic`, the prefix_sha256 the client holds) over `--sessions`
sessions, and the pinned fetch's bundle. Then, in `--rounds` rounds that alternate which tree
goes first, wrk (one client, the same settings for both) drives:

  turn      POST .../turn/ as above, with the previous turn's invocation reported
  reported  the same, with the previous model call's `response` (Anthropic's answer) and `usage`
  fetch     GET .../bundle/, the pinned fetch, for the turn/fetch ratio of the same run

and prints, per tree, the medians of turns/s, p50, p99 and web CPU per turn (the server's
process tree, per request), the machine's CPU per request by who spent it (the server,
PostgreSQL, Redis, wrk, the rest: on shared cores turns/s follows the sum), then, in process
(bench/turn_stages.py, run from each tree on the same data), CPU per turn split by stage,
PostgreSQL's CPU per turn and the SQL statements and commits per turn. `--base .` with
`--base-env NAME=VALUE` compares two settings of this tree.

    .venv/bin/python bench/turn_speed.py --base ../turn-base [--rounds 3] [--duration 8]

DATABASE_URL / REDIS_URL as for `make bench` (embedded ones when unset); the database named by
`--database` on that server is dropped and made anew. Raw output in bench/results/<time>/."""

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pinned_fetch as pf  # noqa: E402  (bench/pinned_fetch.py, beside this script)

from devtools.stack import free_port, start_services, stop_services, web_command  # noqa: E402

ROOT = pf.ROOT

# The previous model call as Anthropic answers it, reported with the next turn (evidence).
RESPONSE = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "support-large-2025-06",
    "content": [{"type": "text", "text": "I have opened a claim for the parcel."}],
    "stop_reason": "end_turn",
    "usage": {
        "input_tokens": 1200,
        "output_tokens": 180,
        "cache_read_input_tokens": 9000,
        "cache_creation_input_tokens": 400,
    },
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="worktree of the commit to compare with (none: this tree alone)")
    parser.add_argument("--duration", type=int, default=8, help="seconds per scenario and round (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating which tree goes first")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--stage-turns", type=int, default=200, help="turns measured in process per tree")
    parser.add_argument(
        "--base-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the --base tree's server alone (e.g. WEB_THREADS=4; --base . compares settings)",
    )
    parser.add_argument("--profile", type=int, default=0, help="cProfile's N costliest functions in stages-*.txt")
    parser.add_argument("--only", help="comma-separated scenarios (turn, reported, fetch)")
    parser.add_argument("--database", default="registry_turn_bench")
    parser.add_argument("--short", action="store_true", help="CI: 2 s, one round, 16 sessions, 30 turns in process")
    ns = parser.parse_args(argv)
    if ns.short:
        ns.duration, ns.rounds, ns.sessions, ns.stage_turns = 2, 1, 16, 30
    return ns


def start_web(
    processes: pf.Processes, tree: Path, port: int, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    argv = web_command(str(port), access_log=False)
    with log.open("wb") as out:
        environ = {**os.environ, **(env or {})}
        proc = subprocess.Popen(
            argv, cwd=tree, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=environ
        )
    processes.running.append(proc)
    return proc


def scenarios_for(base: str, *, ops_key: str, agent_key: str, bundle: str, sessions: int) -> dict:
    ids, prefix, history = pf.create_turn_data(
        base, ops_key=ops_key, agent_key=agent_key, bundle=bundle, sessions=sessions
    )
    if prefix is None:
        raise SystemExit(f"{base} has no turn endpoint")
    fetch_ids, _, _ = pf.create_data(
        base, ops_key=ops_key, agent_key=agent_key, bundle=f"{bundle}-fetch", sessions=sessions
    )
    invoked = pf.skill_cards(100)[0]["name"]
    auth = {"Authorization": f"Bearer {agent_key}"}
    json_auth = {**auth, "Content-Type": "application/json"}
    body = {"messages": history, "format": "anthropic", "k": 5, "prefix_sha256": prefix, "invoked": [invoked]}
    paths = [f"/api/v1/sessions/{i}/turn/" for i in ids]
    reported = {**body, "response": RESPONSE, "usage": {"latency_ms": 850}}
    return {
        "ids": ids,
        "body": body,
        "scenarios": {
            "turn": pf.Scenario("POST turn", "POST", paths, 200, json_auth, json.dumps(body)),
            "reported": pf.Scenario("POST turn, usage reported", "POST", paths, 200, json_auth, json.dumps(reported)),
            "fetch": pf.Scenario("GET bundle", "GET", [f"/api/v1/sessions/{i}/bundle/" for i in fetch_ids], 200, auth),
        },
    }


def stages(
    tree: Path, *, key: str, ids: list[str], body: dict, turns: int, out_dir: Path, name: str, profile: int = 0
) -> dict:
    body_file = out_dir / f"stage-body-{name}.json"
    body_file.write_text(json.dumps(body))
    argv = [
        str(pf.BIN / "python"),
        str(HERE / "turn_stages.py"),  # this tree's profiler, run on the other tree's code
        "--tree",
        str(tree),
        "--key",
        key,
        "--sessions",
        ",".join(ids),
        "--body-file",
        str(body_file),
        "--turns",
        str(turns),
        *(["--profile", str(profile)] if profile else []),
    ]
    (out_dir / f"stages-{name}.argv").write_text(json.dumps(argv))  # to run it again on the data left
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=600)
    (out_dir / f"stages-{name}.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"the in-process turns of {name} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:  # noqa: C901 (a script: set-up, rounds, report)
    ns = parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)", file=sys.stderr)
        return 2

    def on_sigterm(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    os.environ.setdefault("API_THROTTLE_READ", "100000000/m")
    os.environ.setdefault("API_THROTTLE_WRITE", "100000000/m")
    os.environ.setdefault("TURN_CONCURRENCY", "1000")
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    trees = {"new": ROOT}
    if ns.base:
        base = Path(ns.base).resolve()
        if not (base / "manage.py").exists():
            raise SystemExit(f"{base} is not a tree of this project")
        trees = {"old": base, "new": ROOT}
    wanted = ns.only.split(",") if ns.only else ["turn", "reported", "fetch"]

    out_dir = pf.RESULTS / ("turn-" + time.strftime("%Y%m%d-%H%M%S"))
    out_dir.mkdir(parents=True, exist_ok=True)
    processes = pf.Processes()
    handles: list[object] = []
    script_dir = Path(tempfile.mkdtemp(prefix="turn-speed-"))
    try:
        handles = start_services("bench")
        url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{ns.database}").geturl()
        os.environ["DATABASE_URL"] = url
        pf.recreate_database(url)
        print("migrating ...", flush=True)
        pf.manage("migrate", "--no-input", "-v", "0")
        stamp = time.strftime("%Y%m%d%H%M%S")
        ops_key = pf.manage("create_api_key", "--name", f"tb-ops-{stamp}", "--role", "ops").strip().splitlines()[-1]
        agent_key = (
            pf.manage("create_api_key", "--name", f"tb-agent-{stamp}", "--role", "agent").strip().splitlines()[-1]
        )

        servers: dict[str, tuple[subprocess.Popen, str]] = {}
        for name, tree in trees.items():
            port = free_port()
            log = out_dir / f"web-{name}.log"
            env = dict(item.split("=", 1) for item in ns.base_env) if name == "old" else None
            web = start_web(processes, tree, port, log, env)
            servers[name] = (web, f"http://127.0.0.1:{port}")
            pf.wait_until_ready(servers[name][1], web, log)
        data = {}
        for name in trees:
            print(f"creating the data of {name} ...", flush=True)
            data[name] = scenarios_for(
                servers[name][1],
                ops_key=ops_key,
                agent_key=agent_key,
                bundle=f"tb-{name}-{stamp}",
                sessions=ns.sessions,
            )
        wrk_args = {"threads": ns.threads, "connections": ns.connections, "out_dir": out_dir, "script_dir": script_dir}
        for name in trees:  # warm: the routing index, the caches, prepared statements
            web, base_url = servers[name]
            pf.run_wrk(data[name]["scenarios"]["turn"], base=base_url, duration=2, slug=f"warm-{name}", **wrk_args)
        rounds: dict[tuple[str, str], list[pf.Result]] = {(t, s): [] for t in trees for s in wanted}
        order = list(trees)
        for n in range(ns.rounds):
            for name in order if n % 2 == 0 else order[::-1]:
                web, base_url = servers[name]
                for slug in wanted:
                    scenario = data[name]["scenarios"][slug]
                    print(f"round {n + 1}/{ns.rounds}: {name} {scenario.title} for {ns.duration}s ...", flush=True)
                    run = partial(pf.run_wrk, scenario, base=base_url, duration=ns.duration, slug=f"{name}-{slug}-{n}")
                    rounds[(name, slug)].append(pf.measured(partial(run, **wrk_args), web.pid))
        results = {key: pf.median_result(rs) for key, rs in rounds.items()}
        profiles = {}
        for name, tree in trees.items():
            print(f"{name}: {ns.stage_turns} turns in process ...", flush=True)
            profiles[name] = stages(
                tree,
                key=agent_key,
                ids=data[name]["ids"],
                body=data[name]["body"],
                turns=ns.stage_turns,
                out_dir=out_dir,
                name=name,
                profile=ns.profile,
            )
        report(ns, trees, wanted, results, rounds, profiles, out_dir)
        return 0 if all(r.ok for r in results.values()) else 1
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as error:
        print(f"{error.cmd} failed:\n{error.stdout}{error.stderr}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        stop_services(handles)
        shutil.rmtree(script_dir, ignore_errors=True)


def report(ns, trees, wanted, results, rounds, profiles, out_dir: Path) -> None:
    print(
        f"\nwrk: {ns.threads} threads, {ns.connections} connections, {ns.duration}s per scenario, {ns.rounds} round(s)"
        f" alternating (medians); granian {os.environ.get('WEB_CONCURRENCY', '2')} workers per server;"
        f" {os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.1f}\n"
    )
    print(
        f"{'tree':<5} {'scenario':<26} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99/p50':>7} {'CPU us/req':>10}"
        f"  {'each round req/s':<24} errors"
    )
    for (name, slug), r in results.items():
        problems = [f"{n} x {code}" for code, n in sorted(r.unexpected.items())]
        problems += [f"{n} socket {kind}" for kind, n in r.socket_errors.items() if n]
        each = " ".join(f"{x.requests_per_second:.0f}" for x in rounds[(name, slug)])
        print(
            f"{name:<5} {r.scenario.title:<26} {r.requests_per_second:>9.1f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f}"
            f" {r.p99_ms / max(r.p50_ms, 0.001):>7.1f} {r.server_cpu_us:>10.0f}  {each:<24}"
            f" {', '.join(problems) or 'none'}"
        )
    print("\nthe machine's CPU per request (us; web: the server's processes, other: the kernel and the rest):")
    for (name, _slug), r in results.items():
        split = ", ".join(f"{k} {v:.0f}" for k, v in r.machine_cpu_us.items() if k != "machine")
        print(f"  {name:<4} {r.scenario.title:<26} {r.machine_cpu_us.get('machine', 0):>7.0f}  ({split})")
    summary: dict = {}
    for name in trees:
        turn, fetch = results.get((name, "turn")), results.get((name, "fetch"))
        prof = profiles[name]
        summary[name] = {
            "turns_per_s": turn.requests_per_second if turn else None,
            "p50_ms": turn.p50_ms if turn else None,
            "p99_ms": turn.p99_ms if turn else None,
            "web_cpu_us_per_turn": round(turn.server_cpu_us) if turn else None,
            "machine_cpu_us_per_turn": {k: round(v) for k, v in turn.machine_cpu_us.items()} if turn else None,
            "fetch_rps": fetch.requests_per_second if fetch else None,
            "turn_over_fetch": round(turn.requests_per_second / fetch.requests_per_second, 3)
            if turn and fetch
            else None,
            "in_process": prof,
        }
    print("\nin process (the fast lane's serve, one turn after another, same data):")
    for name, prof in profiles.items():
        stages_text = ", ".join(f"{k} {v}" for k, v in prof["stages_us"].items())
        print(
            f"  {name:<4} CPU {prof['cpu_us']} us/turn (PostgreSQL's {prof.get('db_cpu_us')}),"
            f" SQL {prof['sql_per_turn']} statements"
            f" + {prof['commits_per_turn']} commits per turn; by stage (us): {stages_text}"
        )
    if "old" in summary:
        old, new = summary["old"], summary["new"]
        if old["turns_per_s"] and new["turns_per_s"]:
            print(
                f"\nnew/old: {new['turns_per_s'] / old['turns_per_s']:.2f}x turns/s,"
                f" web CPU per turn {old['web_cpu_us_per_turn']} -> {new['web_cpu_us_per_turn']} us,"
                f" in process {old['in_process']['cpu_us']} -> {new['in_process']['cpu_us']} us"
            )
        for name in trees:
            if summary[name]["turn_over_fetch"] is not None:
                print(f"{name}: turns/s over the same server's fetches/s: {summary[name]['turn_over_fetch']}")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nraw output: {out_dir.relative_to(ROOT)}/ (summary.json)")


if __name__ == "__main__":
    sys.exit(main())
