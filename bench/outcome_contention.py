"""Many sessions of one version ending at once (issue 39): does the end with an outcome, which
adds to that day's rollup row (evidence.counts.add_now) in the end's transaction, serialise on
the row?

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/outcome_contention.py [--clients 1,32,64] [--ends 2000]

Every mode ends fresh sessions of one bundle whose labels all target one version, as the end
route does it (sessions_app.selectors.session_get, then the service), from `--clients`
concurrent clients: threads, each with its own connection, over `--procs` processes.

* plain: `session_end`, the end without a body (no rollup write): the baseline;
* outcome: `session_end_outcome`, every session through `production`: every end adds to the
  same rollup row (version, label, day), whose row lock it holds until its commit;
* outcome-spread: the same, each client's sessions through its own label on the same version:
  one rollup row per client, so nothing is shared; outcome vs outcome-spread is the row's cost.

Prints per mode and number of clients: ends/s, p50 and p99 of one end, the client's CPU per
end (the processes' CPU time) and the server's (the PostgreSQL backends' utime + stime, read
from /proc), each as a ratio to `plain` at the same number of clients. The database is
`registry_outcome_bench` on DATABASE_URL's server (recreated; `--database`)."""

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

MODES = ("plain", "outcome", "outcome-spread")
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """A PostgreSQL backend's CPU seconds so far (utime + stime; the server runs on this host)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def client(mode: str, key_id: int, ids: list[str], barrier: Any, out: list[Any]) -> None:
    """One client: end `ids` one after the other, timing each."""
    from django.db import connection

    from access.models import ApiKey
    from evidence.services import OutcomeIn, session_end_outcome
    from sessions_app.selectors import session_get
    from sessions_app.services import session_end

    actor = ApiKey.objects.get(pk=key_id).as_actor()
    outcome = OutcomeIn(status="resolved", reason="")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    barrier.wait()
    server, started, times = backend_cpu(pid), time.time(), []
    for session_id in ids:
        t = time.perf_counter()
        session = session_get(session_id=session_id, actor=actor)
        if mode == "plain":
            session_end(session=session, actor=actor)
        else:
            session_end_outcome(session=session, actor=actor, outcome=outcome)
        times.append(time.perf_counter() - t)
    out.append((started, time.time(), times, backend_cpu(pid) - server))
    connection.close()


def process(mode: str, key_id: int, shares: list[list[str]], barrier: Any, queue: Any) -> None:
    """One process of clients (a thread per share of sessions)."""
    import django

    django.setup()
    out: list[Any] = []
    threads = [threading.Thread(target=client, args=(mode, key_id, ids, barrier, out)) for ids in shares]
    cpu = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put((time.process_time() - cpu, out))


def start_sessions(bundle: Any, actor: Any, labels: list[str], per_label: int) -> list[list[str]]:
    """per_label sessions through each label, started in batches (not measured)."""
    from sessions_app.services import sessions_start_on_label

    shares = []
    for label in labels:
        ids: list[str] = []
        while len(ids) < per_label:
            n = min(500, per_label - len(ids))
            started = sessions_start_on_label(bundle=bundle, label=label, starts=[(actor, None, None)] * n)
            ids += [str(s.pk) for s in started]
        shares.append(ids)
    return shares


def run(mode: str, clients: int, ns: argparse.Namespace, world: dict[str, Any]) -> dict[str, float]:
    per_client = max(1, ns.ends // clients)
    labels = [f"c{i}" for i in range(clients)] if mode == "outcome-spread" else ["production"]
    if mode == "outcome-spread":
        from registry.services import label_move

        for label in labels:
            if label not in world["labels"]:
                label_move(bundle=world["bundle"], name=label, version=world["version"], actor=world["ops"], reason="b")
                world["labels"].add(label)
        shares = start_sessions(world["bundle"], world["agent"], labels, per_client)
    else:
        flat = start_sessions(world["bundle"], world["agent"], labels, per_client * clients)[0]
        shares = [flat[i::clients] for i in range(clients)]
    procs = min(ns.procs, clients)
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(clients), ctx.Queue()
    workers = [
        ctx.Process(target=process, args=(mode, world["agent_id"], shares[p::procs], barrier, queue))
        for p in range(procs)
    ]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    spans = [c for _, out in results for c in out]
    times = sorted(t for c in spans for t in c[2])
    wall = max(c[1] for c in spans) - min(c[0] for c in spans)
    return {
        "ends": len(times),
        "per_s": len(times) / wall,
        "p50": 1000 * statistics.median(times),
        "p99": 1000 * times[int(0.99 * (len(times) - 1))],
        "client_cpu": 1000 * sum(cpu for cpu, _ in results) / len(times),
        "server_cpu": 1000 * sum(c[3] for c in spans) / len(times),
    }


def setup(ns: argparse.Namespace) -> dict[str, Any]:
    from urllib.parse import urlsplit

    from pinned_fetch import manage, recreate_database

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-" + "x" * 50)
    os.environ.setdefault("DJANGO_SECURE", "0")
    url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{ns.database}").geturl()
    os.environ["DATABASE_URL"] = url  # the spawned processes inherit it
    recreate_database(url)
    manage("migrate", "--no-input", "-v", "0")
    import django

    django.setup()
    import logging

    logging.getLogger("registry.events").setLevel(logging.WARNING)
    from access.actors import SYSTEM
    from access.models import Role
    from access.services import api_key_create
    from registry.services import bundle_create, label_move, version_publish

    ops = api_key_create(name="bench-ops", role=Role.OPS, actor=SYSTEM)[0].as_actor()
    agent_key = api_key_create(name="bench-agent", role=Role.AGENT, actor=SYSTEM)[0]
    bundle = bundle_create(name="ends", actor=ops)
    version = version_publish(bundle=bundle, content={"system_prompt": "Ends.", "tools": []}, message="v1", actor=ops)
    label_move(bundle=bundle, name="production", version=version.version, actor=ops, reason="b")
    return {
        "bundle": bundle,
        "version": version.version,
        "ops": ops,
        "agent": agent_key.as_actor(),
        "agent_id": agent_key.pk,
        "labels": {"production"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,32,64", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--ends", type=int, default=2000, help="ends per mode and number of clients")
    parser.add_argument("--procs", type=int, default=4, help="client processes (threads share them)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat each measurement, keep the median's")
    parser.add_argument("--database", default="registry_outcome_bench")
    ns = parser.parse_args(argv)
    world = setup(ns)
    print(f"{ns.ends:,} ends per row, {ns.procs} client processes at most, on {os.cpu_count()} cores")
    print()
    print(
        "| clients | mode | ends/s | p50 ms | p99 ms | client CPU ms/end | server CPU ms/end "
        "| vs plain: ends/s, p99, CPU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for clients in (int(c) for c in ns.clients.split(",")):
        base: dict[str, float] = {}
        for mode in MODES:
            rounds = [run(mode, clients, ns, world) for _ in range(ns.rounds)]
            r = sorted(rounds, key=lambda x: x["per_s"])[len(rounds) // 2]
            base = base or r
            cpu = (r["client_cpu"] + r["server_cpu"]) / (base["client_cpu"] + base["server_cpu"])
            print(
                f"| {clients} | {mode} | {r['per_s']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['client_cpu']:.2f} "
                f"| {r['server_cpu']:.2f} | x{r['per_s'] / base['per_s']:.2f}, x{r['p99'] / base['p99']:.2f}, "
                f"x{cpu:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
