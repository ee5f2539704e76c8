"""Where a turn call's CPU goes, in process: the fast lane's one-by-one path for the turn
(api.fastlane.serve, the key read, the rate limit, the turn slot, the route's answer, the
encoding), called `--turns` times in a row after `--warm` unreported ones, with each named
function's CPU time attributed to its stage (exclusive: a stage called inside another counts for
itself only), and the SQL statements and commits counted.

Run by bench/turn_speed.py against each tree it compares (this file is read from the tree that
runs it, and the tree under test is put first on sys.path), so the same stages are measured
for the old code and the new one: a name a tree does not have is skipped.

    .venv/bin/python bench/turn_stages.py --tree ../turn-base --key KEY \
        --sessions ID,ID,... --body-file body.json [--turns 200]

Prints one JSON object: cpu_us (per turn, all threads of the process), stages_us, sql and
commits per turn."""

import argparse
import importlib
import json
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (stage, module, attribute): attribute may be "Class.method". Looked up in the tree under test.
TARGETS: list[tuple[str, str, str]] = [
    ("parse", "api.fastlane", "_parsed"),
    ("parse", "turns.compose", "parse"),
    ("parse", "api.parsers", "parse_body"),
    ("read", "api.fastlane", "_read"),
    ("read", "api.fastlane", "api_key_match"),
    ("read", "turns.compose", "session_for_turn"),
    ("read", "turns.compose", "content_document"),
    ("read", "turns.compose", "pinned_for"),
    ("read", "skills.selectors", "last_turn_number"),
    ("read", "skills.selectors", "session_cards"),
    ("read", "skills.turn_state", "_read"),
    ("read", "turns.compose", "read_state"),
    ("limit", "api.fastlane", "api_throttle_wait"),
    ("limit", "access.ratelimit", "turn_slot"),
    ("limit", "api.fastlane", "api_throttle_wait_then_slot"),  # the two above in one round trip
    ("limit", "access.ratelimit", "Slot.release"),  # the slot given back: the third round trip
    ("route", "skills.services", "skill_route"),
    ("route", "skills.turn_state", "turn_skills"),
    ("route", "skills.turn_state", "plan"),
    ("router", "skills.router", "Index.route"),  # the router's own work, inside the route stage
    ("render", "turns.compose", "render_session"),
    ("render", "turns.compose", "render_for_turn"),
    ("compact", "turns.compose", "prepare"),
    ("layout", "turns.compose", "lay_out"),
    ("layout", "turns.compose", "_answer"),
    ("write", "skills.services", "skill_turn_report"),
    ("write", "evidence.services", "turn_reported"),
    ("write", "skills.turn_state", "_write"),
    ("write", "skills.turn_state", "write"),
    ("write", "skills.turn_batch", "write_many"),
    ("write", "psycopg", "Connection.commit"),
    ("encode", "rest_framework.renderers", "JSONRenderer.render"),
    ("encode", "api.routes", "_encode"),
    ("encode", "core.jsonbytes", "dumps"),
    ("parse", "core.jsonbytes", "loads"),
]

_local = threading.local()
_cpu: dict[str, float] = defaultdict(float)
_lock = threading.Lock()


def _stack() -> list[list[Any]]:
    if not hasattr(_local, "stack"):
        _local.stack = [["other", time.thread_time()]]
    return _local.stack


def _switch(stack: list[list[Any]]) -> None:
    now = time.thread_time()
    top = stack[-1]
    with _lock:
        _cpu[top[0]] += now - top[1]
    top[1] = now


def _timed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack = _stack()
        _switch(stack)
        stack.append([stage, time.thread_time()])
        try:
            return fn(*args, **kwargs)
        finally:
            _switch(stack)
            stack.pop()
            stack[-1][1] = time.thread_time()

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def install() -> list[str]:
    """Wrap every target the tree has; returns the ones found."""
    found = []
    for stage, module_name, attribute in TARGETS:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            continue
        setattr(owner, name, _timed(stage, getattr(owner, name)))
        found.append(f"{stage}:{module_name}.{attribute}")
    return found


class Counter:
    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0

    def install(self) -> None:
        import psycopg

        counter = self
        for cls in (psycopg.Cursor,):
            for method in ("execute", "executemany"):
                original = getattr(cls, method)

                def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                    counter.statements += 1
                    return _original(self, *args, **kwargs)

                setattr(cls, method, counted)
        commit = psycopg.Connection.commit

        def committed(self: Any) -> Any:
            counter.commits += 1
            return commit(self)

        psycopg.Connection.commit = committed  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--sessions", required=True, help="comma-separated session ids")
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--profile", type=int, default=0, help="also print cProfile's N costliest functions")
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve())
    sys.path[:0] = [tree]
    os.chdir(tree)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    from api import fastlane
    from api.routes import BY_NAME

    counter = Counter()
    counter.install()
    found = install()
    route = BY_NAME["turn"]
    headers = {b"authorization": f"Bearer {args.key}".encode(), b"content-type": b"application/json"}
    body = Path(args.body_file).read_bytes()
    sessions = args.sessions.split(",")
    flush = getattr(importlib.import_module("turns.state"), "flush_now", None) if _has("turns.state") else None

    def one(n: int) -> None:
        answer = fastlane.serve(route=route, session_id=sessions[n % len(sessions)], headers=headers, body=body)
        if answer.status != 200:
            raise SystemExit(f"turn answered {answer.status}: {answer.body[:300]!r}")

    for n in range(args.warm):
        one(n)
    if flush is not None:
        flush()
    _cpu.clear()
    counter.statements = counter.commits = 0
    _local.stack = [["other", time.thread_time()]]
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)  # CPU, not waiting
        profiler.enable()
    backend = _backend(connection)
    db_began = _cpu_of(backend)
    began = time.process_time()
    for n in range(args.turns):
        one(args.warm + n)
    if flush is not None:
        flush()  # the writes this process still holds are part of the turns' cost
    cpu = time.process_time() - began
    db_cpu = _cpu_of(backend) - db_began if backend is not None else None
    if profiler is not None:
        import pstats

        profiler.disable()
        order = os.environ.get("PROFILE_SORT", "tottime")  # or cumulative
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(order).print_stats(args.profile)
    _switch(_stack())
    connection.close()
    per = 1e6 / args.turns
    print(
        json.dumps(
            {
                "turns": args.turns,
                "cpu_us": round(cpu * per),
                # PostgreSQL's CPU for them (its backend for this process's one connection),
                # when the server runs on this machine
                "db_cpu_us": round(db_cpu * per) if db_cpu is not None else None,
                "stages_us": {k: round(v * per) for k, v in sorted(_cpu.items(), key=lambda kv: -kv[1])},
                "sql_per_turn": round(counter.statements / args.turns, 2),
                "commits_per_turn": round(counter.commits / args.turns, 2),
                "wrapped": found,
            }
        )
    )


def _backend(connection: Any) -> Any:
    """The PostgreSQL backend process serving `connection`, when it runs on this machine."""
    try:
        import psutil

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            process = psutil.Process(cursor.fetchone()[0])
        return process if process.name().startswith("postgres") else None
    except Exception:  # psutil missing, another machine's server, not allowed to read it
        return None


def _cpu_of(process: Any) -> float:
    times = process.cpu_times() if process is not None else None
    return times.user + times.system if times is not None else 0.0


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
