"""The chaos suite: `make chaos` (full tier) and `make chaos-short` (CI's tier, a few rounds each).

    python -m chaos [--short] [--only TEXT ...] [--repeat N]

Starts its own stack (chaos/stack.py), runs each fault against it under bounded load aimed at
127.0.0.1, prints one table of figures, and exits non-zero when an invariant breaks: a version
drained early (with an active session), an acknowledged write missing afterwards, a 5xx other
than 503 during an outage (or any 5xx to hostile input), no 503 within 5 s of PostgreSQL
freezing or no success within 2 s of it answering again, a request over 2 s with Redis hung,
a drain not done after a worker came back, a session expired twice, a slow client holding up
other requests, a key reading a knowledge pack outside its scope, a metrics series added by
hostile input. Figures from a full run are in docs/reliability.md."""

import argparse
import itertools
import json
import os
import re
import signal
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable

from chaos.client import Api, Load, Row, bundle_with_label, move_to_v2, percentile, version_state
from chaos.freeze import freeze
from chaos.hostile import corpus
from chaos.metrics_series import metrics_series
from chaos.pg_hang import postgres_hang
from chaos.scope import cross_scope
from chaos.stack import Stack
from chaos.tarpit import tarpit
from chaos.two_nodes import two_nodes


def wait_until(predicate: Callable[[], bool], seconds: float, step: float = 0.05) -> float | None:
    """Seconds until `predicate()` held, or None if it did not within `seconds`."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if predicate():
            return time.monotonic() - began
        time.sleep(step)
    return None


def early_drains(stack: Stack) -> int:
    """Versions marked drained while a session pinned to them is still active: never allowed."""
    [(count,)] = stack.sql(
        "SELECT count(*) FROM registry_bundleversion v JOIN sessions_app_session s ON s.version_id = v.id "
        "WHERE v.state = 'drained' AND s.status = 'active'"
    )
    return int(count)


def draining_with_an_ended_session(api: Api, name: str) -> str:
    """Bundle `name`: v1 draining, its one session about to end. Returns that session's id."""
    bundle_with_label(api, name)
    session = api.ok("POST", "/api/v1/sessions/", {"bundle": name})["id"]
    move_to_v2(api, name)
    return session


def fmt(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    return f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"


# --- workers ----------------------------------------------------------------------------------


def worker_kills(stack: Stack, api: Api, rounds: int) -> list[Row]:
    """kill -9 of the whole worker right after a drain became due; a new worker must drain it."""
    bundle_with_label(api, "wk-keep")
    api.ok("POST", "/api/v1/sessions/", {"bundle": "wk-keep"})  # stays active: v1 must never drain
    move_to_v2(api, "wk-keep")
    after_restart: list[float] = []
    for r in range(rounds):
        name = f"wk-{r}"
        session = draining_with_an_ended_session(api, name)
        api.ok("POST", f"/api/v1/sessions/{session}/end/")  # the drain is enqueued on commit
        time.sleep(0.02 * (r % 5))  # kill at different points: queued, delivered, running
        stack.procs["worker"].kill()
        time.sleep(0.3)
        stack.start_worker()
        took = wait_until(lambda n=name: version_state(api, n, 1) == "drained", 20)
        if took is not None:
            after_restart.append(took)
    early = early_drains(stack) + (version_state(api, "wk-keep", 1) == "drained")
    return [
        ("worker kill -9", "drains completed", f"{len(after_restart)}/{rounds}", len(after_restart) == rounds),
        ("worker kill -9", "drained early", str(early), early == 0),
        (
            "worker kill -9",
            "drained after the worker was back",
            fmt(after_restart),
            bool(after_restart) and max(after_restart) <= 5,
        ),
    ]


def pool_child_kills(stack: Stack, api: Api, rounds: int) -> list[Row]:
    """kill -9 of every pool child right after a drain became due; timed from when the worker
    has its children back (the main process forks new ones)."""
    took_all: list[float] = []
    for r in range(rounds):
        name = f"pk-{r}"
        session = draining_with_an_ended_session(api, name)
        api.ok("POST", f"/api/v1/sessions/{session}/end/")
        killed = stack.procs["worker"].children()
        for child in killed:
            os.kill(child, signal.SIGKILL)

        def back(old: list[int] = killed) -> bool:
            now = stack.procs["worker"].children()
            return len(now) >= len(old) and not set(now) & set(old)

        wait_until(back, 20)
        took = wait_until(lambda n=name: version_state(api, n, 1) == "drained", 20)
        if took is not None:
            took_all.append(took)
    return [
        ("pool child kill -9", "drains completed", f"{len(took_all)}/{rounds}", len(took_all) == rounds),
        (
            "pool child kill -9",
            "drained after the children were back",
            fmt(took_all),
            bool(took_all) and max(took_all) <= 5,
        ),
    ]


def two_beats(stack: Stack, api: Api, sessions: int) -> list[Row]:
    """A second beat for a while: every lapsed session is expired exactly once."""
    log = stack.procs["worker"].log
    offset = len(log.read_text(errors="replace"))
    stack.start_beat("beat2")
    bundle_with_label(api, "beats")
    ids = [api.ok("POST", "/api/v1/sessions/", {"bundle": "beats", "ttl_seconds": 1})["id"] for _ in range(sessions)]
    interval = int(stack.env["SESSION_SWEEP_INTERVAL"])

    def all_expired() -> bool:
        [(n,)] = stack.sql("SELECT count(*) FROM sessions_app_session WHERE id = ANY(%s) AND status = 'expired'", [ids])
        return n == len(ids)

    took = wait_until(all_expired, 4 * interval + 10, step=0.2)
    time.sleep(interval * 2)  # a few more sweeps from both beats
    stack.procs["beat2"].stop()
    text = log.read_text(errors="replace")[offset:]
    results = re.findall(r"sweep_task\[[^\]]+\] succeeded in [\d.e-]+s: (.*)", text)
    expired = sum(int(m.group(1)) for r in results if (m := re.search(r"'expired': (\d+)", r)))
    skipped = sum(1 for r in results if r.strip() == "None")
    return [
        ("two beats", "sweeps run / skipped (lock held)", f"{len(results) - skipped} / {skipped}", None),
        (
            "two beats",
            "lapsed sessions expired once each",
            f"{expired} expirations for {sessions}",
            took is not None and expired == sessions,
        ),
    ]


# --- Redis --------------------------------------------------------------------------------------


REDIS_ROUNDS = itertools.count()  # each run of a Redis scenario its own bundle (--repeat)


def redis_fault(stack: Stack, api: Api, *, hung: bool, baseline: float, fault: float, after: float) -> list[Row]:
    label = "Redis hung (SIGSTOP)" if hung else "Redis stopped"
    name = f"rd-{'hung' if hung else 'stop'}-{next(REDIS_ROUNDS)}"
    pending = draining_with_an_ended_session(api, name)
    redis = stack.procs["redis"]
    with Load(stack.web_port, stack.ops_key, "load", threads=4) as load:
        time.sleep(baseline)
        t_fault = time.monotonic()
        if hung:
            redis.send(signal.SIGSTOP)
        else:
            redis.stop()
        time.sleep(0.3)
        side = Api(stack.web_port, stack.ops_key, timeout=10)
        end_status, _ = side.call("POST", f"/api/v1/sessions/{pending}/end/")  # wants a drain: Redis is away
        time.sleep(max(0.0, fault - 0.3))
        t_back = time.monotonic()
        if hung:
            redis.send(signal.SIGCONT)
        else:
            stack.start_redis()
        catch_up = wait_until(lambda: version_state(side, name, 1) == "drained", 60, step=0.2)
        time.sleep(after)
    base = load.window(t_fault - baseline, t_fault)
    during = load.window(t_fault, t_back)
    settled = load.window(t_fault + 1, t_back)  # "within a second of the first timeout"
    rate_base = len(base) / baseline
    rate_fault = len(during) / (t_back - t_fault)
    latencies = [s.latency for s in settled]
    over_2s = sum(1 for s in during if s.latency > 2)
    bad_5xx = sum(1 for s in during if s.status >= 500 or s.status == 0)
    rows: list[Row] = [
        (
            label,
            "requests/s normal -> during",
            f"{rate_base:.0f} -> {rate_fault:.0f} ({rate_fault / max(rate_base, 1e-9):.0%})",
            rate_fault >= 0.8 * rate_base if hung else None,
        ),
        (label, "5xx or no answer during", str(bad_5xx), bad_5xx == 0),
        (
            label,
            "p50 / p99 after the first second",
            f"{percentile(latencies, 50) * 1000:.0f} / {percentile(latencies, 99) * 1000:.0f} ms",
            percentile(latencies, 99) < 0.1 if hung else None,
        ),
        (
            label,
            "max latency; requests over 2 s",
            f"{max((s.latency for s in during), default=0) * 1000:.0f} ms; {over_2s}",
            over_2s == 0,
        ),
        (label, "session end during the fault", str(end_status), end_status == 200),
        (
            label,
            "drain caught up after Redis returned",
            f"{catch_up:.1f} s" if catch_up is not None else "not within 60 s",
            catch_up is not None,
        ),
    ]
    side.close()
    return rows


# --- PostgreSQL ---------------------------------------------------------------------------------


def postgres_outage(stack: Stack, *, baseline: float, fault: float, after: float) -> list[Row]:
    with Load(stack.web_port, stack.ops_key, "load", threads=4) as load:
        time.sleep(baseline)
        t_down = time.monotonic()
        stack.stop_postgres()
        time.sleep(fault)
        stack.start_postgres()
        t_up = time.monotonic()
        time.sleep(after)
    during = load.window(t_down, t_up)
    statuses = Counter(s.status for s in during)
    wrong = sum(n for status, n in statuses.items() if status >= 500 and status != 503)
    no_answer = statuses.get(0, 0)
    first_ok = min(
        (s.at + s.latency for s in load.samples if s.at >= t_up and s.status < 500 and s.status), default=None
    )
    recovery = first_ok - t_up if first_ok is not None else None
    started, ended = sorted(load.started_ids), sorted(load.ended_ids)
    [(found,)] = stack.sql("SELECT count(*) FROM sessions_app_session WHERE id = ANY(%s::uuid[])", [started])
    [(found_ended,)] = stack.sql(
        "SELECT count(*) FROM sessions_app_session WHERE id = ANY(%s::uuid[]) AND status = 'ended'", [ended]
    )
    shown = ", ".join(f"{k or 'none'}: {v}" for k, v in sorted(statuses.items()))
    return [
        ("PostgreSQL stopped", f"answers during {fault:.0f} s down", shown or "-", None),
        ("PostgreSQL stopped", "5xx other than 503; no answer", f"{wrong}; {no_answer}", wrong == 0 and no_answer == 0),
        (
            "PostgreSQL stopped",
            "first success after restart",
            f"{recovery:.2f} s" if recovery is not None else "never",
            recovery is not None and recovery < 5,
        ),
        (
            "PostgreSQL stopped",
            "acknowledged starts / ends found",
            f"{found}/{len(started)} / {found_ended}/{len(ended)}",
            found == len(started) and found_ended == len(ended),
        ),
    ]


# --- slow clients ---------------------------------------------------------------------------------


def slow_bodies(stack: Stack, clients: int) -> list[Row]:
    """Connections that announce a 100-byte body and send 10 bytes, held open."""
    socks = []
    for _ in range(clients):
        s = socket.create_connection(("127.0.0.1", stack.web_port), 5)
        s.sendall(
            b"POST /api/v1/sessions/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {stack.ops_key}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"bundle":'
        )
        socks.append(s)
    api = Api(stack.web_port, stack.ops_key, timeout=10)
    latencies = []
    for _ in range(20):
        began = time.monotonic()
        status, _, _ = api.raw("GET", "/healthz")
        latencies.append(time.monotonic() - began if status == 200 else 99.0)
        time.sleep(0.1)
    answered = Counter()
    for s in socks:
        s.settimeout(10)
        try:
            first = s.recv(64).split(b" ")
            answered[first[1].decode() if len(first) > 1 else "closed"] += 1
        except OSError:
            answered["no answer"] += 1
        s.close()
    api.close()
    return [
        (
            "slow bodies",
            f"/healthz with {clients} slow clients: p50 / max",
            f"{percentile(latencies, 50) * 1000:.0f} / {max(latencies) * 1000:.0f} ms",
            max(latencies) < 1,
        ),
        ("slow bodies", "what the slow clients got", ", ".join(f"{k}: {v}" for k, v in sorted(answered.items())), None),
    ]


# --- hostile input --------------------------------------------------------------------------------


def hostile(stack: Stack, api: Api) -> list[Row]:
    session = api.ok("POST", "/api/v1/sessions/", {"bundle": "load"})["id"]
    statuses: Counter[int] = Counter()
    wrong_shape = framing = 0
    for method, path, body, headers in corpus(session):
        status, data, _ = api.raw(method, path, body, headers)
        statuses[status] += 1
        if "Content-Length" in headers:
            # Broken HTTP framing (-1, 99999999999999999999) is refused by the HTTP server
            # itself (a bare 400) before any application code runs, so the API's error shape
            # cannot apply here; in production nginx refuses it first, in the error shape
            # (deploy/nginx.conf, tests/edge/test_edge_hardening.py runs it).
            framing += status == 400
            continue
        if status >= 400:
            try:
                error = json.loads(data)["error"]
                if set(error) != {"code", "message", "details"}:
                    wrong_shape += 1
            except (ValueError, KeyError, TypeError):
                wrong_shape += 1
    total = sum(statuses.values())
    bad = sum(n for status, n in statuses.items() if status >= 500 or status == 0)
    return [
        ("hostile input", "requests; 5xx or no answer", f"{total}; {bad}", bad == 0),
        ("hostile input", "answers by status", ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())), None),
        ("hostile input", "errors not in the contract's shape", str(wrong_shape), wrong_shape == 0),
        ("hostile input", "broken HTTP framing refused by the server", str(framing), None),
    ]


# --- the run --------------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    line = f"| {'scenario':<{widths[0]}} | {'figure':<{widths[1]}} | {'value':<{widths[2]}} | ok |"
    print(line)
    print(f"| {'-' * widths[0]} | {'-' * widths[1]} | {'-' * widths[2]} | -- |")
    for scenario, figure, value, ok in rows:
        mark = "" if ok is None else ("yes" if ok else "**NO**")
        print(f"| {scenario:<{widths[0]}} | {figure:<{widths[1]}} | {value:<{widths[2]}} | {mark} |")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="CI's tier: a few rounds each, about two minutes")
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="run only the scenarios whose title contains TEXT (case-insensitive; may be repeated)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the chosen scenarios N times against the same stack (to measure a rare failure)",
    )
    ns = parser.parse_args()
    short = ns.short
    began = time.monotonic()
    stack = Stack(sweep_interval=2)
    rows: list[Row] = []
    try:
        print(f"chaos: starting its own stack in {stack.dir}", flush=True)
        stack.up()
        api = Api(stack.web_port, stack.ops_key)
        bundle_with_label(api, "load")
        steps: list[tuple[str, Callable[[], list[Row]]]] = [
            ("hostile input", lambda: hostile(stack, api)),
            (
                "metrics series",
                lambda: metrics_series(stack, api, methods=1000 if short else 5000, each=100 if short else 500),
            ),
            ("slow bodies", lambda: slow_bodies(stack, 8)),
            ("worker freeze", lambda: freeze(stack, api, threads=4, seconds=8 if short else 30)),
            ("cross-scope reads", lambda: cross_scope(stack, 3 if short else 20, 4 if short else 8)),
            ("worker kills", lambda: worker_kills(stack, api, 3 if short else 20)),
            ("pool child kills", lambda: pool_child_kills(stack, api, 2 if short else 5)),
            ("two beats", lambda: two_beats(stack, api, 5 if short else 20)),
            (
                "webhook tarpit",
                lambda: tarpit(
                    stack, api, sessions=5 if short else 20, drains=2 if short else 5, backlog=10 if short else 40
                ),
            ),
            (
                "Redis stopped",
                lambda: redis_fault(
                    stack, api, hung=False, baseline=3 if short else 10, fault=5 if short else 20, after=1
                ),
            ),
            (
                "Redis hung",
                lambda: redis_fault(
                    stack, api, hung=True, baseline=3 if short else 10, fault=5 if short else 30, after=1
                ),
            ),
            (
                "two web nodes",
                lambda: two_nodes(stack, before=2 if short else 10, after=2 if short else 10, rejoin=10),
            ),
            (
                "PostgreSQL stopped",
                lambda: postgres_outage(stack, baseline=3 if short else 10, fault=5 if short else 20, after=3),
            ),
            (
                "PostgreSQL hung",
                lambda: postgres_hang(stack, baseline=2 if short else 10, fault=8 if short else 20, after=3),
            ),
        ]
        if ns.only:
            steps = [(t, s) for t, s in steps if any(o.lower() in t.lower() for o in ns.only)]
            if not steps:
                parser.error(f"no scenario title contains any of {ns.only}")
        for title, step in steps * ns.repeat:
            print(f"chaos: {title} ...", flush=True)
            step_began = time.monotonic()
            try:
                rows += step()
            except Exception as exc:  # one scenario failing to run is a broken invariant, not a crash
                rows.append((title, "ran to the end", f"{type(exc).__name__}: {str(exc)[:120]}", False))
            print(f"chaos: {title} done in {time.monotonic() - step_began:.0f} s", flush=True)
        api.close()
        exits = ", ".join(f"{name} ({code})" for name, code in stack.worker_exits) or "none"
        rows.append(("the whole run", "workers that exited (restarted)", exits, not stack.worker_exits))
    finally:
        stack.down()
    tier = "short" if short else "full"
    print(f"\nchaos ({tier} tier, {time.monotonic() - began:.0f} s, {os.cpu_count()} CPUs)\n")
    print_table(rows)
    broken = [r for r in rows if r[3] is False]
    if broken:
        print(f"\n{len(broken)} invariant(s) broken:", *(f"  {r[0]}: {r[1]} = {r[2]}" for r in broken), sep="\n")
        return 1
    print("\nevery invariant held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
