"""The fast lane's batched per-turn calls, timed in process: one batch (api.fastlane.serve_calls)
of N fetches, 304s, heartbeats or ends, and the same calls answered one by one (api.fastlane.serve,
the path of every call the batch does not take). Prints, per kind, the median wall time and the
median CPU time of the thread per batch and per call, over `--batches` batches, in interleaved
rounds (medians of the rounds' medians). Then the one-call functions both lanes use for a session's body and answer
(api.views.sessions.session_in and session_out) against the DRF serializers they stand for
(SessionIn, SessionOut), per call.

What it is for: a change to the batched path's rules, reads or answers (docs/architecture.md,
"The fast lane's batched path") shows its cost here without the HTTP server and wrk, whose
figures move by more than such a change on a busy machine. `make bench-short` remains the
figure of record for requests per second.

    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python bench/batched_calls.py
    ... bench/batched_calls.py --batch 8 --batches 200 --rounds 3

The database in DATABASE_URL is migrated and gets a new bundle, keys and sessions each run."""

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONTENT = {
    "system_prompt": "Refund orders with `process_refund` after the customer confirmed the amount.",
    "model": {"name": "claude-sonnet-4-6", "max_tokens": 1024},
    "tools": [
        {
            "name": "process_refund",
            "description": "Refund an order.",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        }
    ],
}


def timed(run: Callable[[Any], object], items: list[Any]) -> dict[str, float]:
    """Median wall and thread-CPU milliseconds of run(item) over items (the first one warms up)."""
    run(items[0])
    walls, cpus = [], []
    for item in items[1:]:
        wall, cpu = time.perf_counter(), time.thread_time()
        run(item)
        cpus.append((time.thread_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    return {"wall_ms": statistics.median(walls), "cpu_ms": statistics.median(cpus)}


def setup(sessions: int) -> tuple[str, list[str], str]:
    """A bundle with a production label, an agent key and `sessions` sessions on it."""
    from access.actors import SYSTEM
    from access.services import api_key_authenticate, api_key_create
    from registry import services as registry_services
    from sessions_app import turns

    stamp = f"{time.strftime('%H%M%S')}{secrets.token_hex(3)}"
    _, ops_secret = api_key_create(name=f"bench-ops-{stamp}", role="ops", actor=SYSTEM)
    _, agent_secret = api_key_create(name=f"bench-agent-{stamp}", role="agent", actor=SYSTEM)
    ops = api_key_authenticate(secret=ops_secret)
    agent = api_key_authenticate(secret=agent_secret)
    assert ops is not None and agent is not None
    bundle = registry_services.bundle_create(name=f"bench-batch-{stamp}", actor=ops)
    published = registry_services.version_publish(bundle=bundle, content=CONTENT, message="bench", actor=ops)
    registry_services.label_move(bundle=bundle, name="production", actor=ops, reason="bench", version=published.version)
    ids = [str(turns.session_started(actor=agent, data={"bundle": bundle.name})[0].pk) for _ in range(sessions)]
    return agent_secret, ids, published.version.content_hash


def measure(secret: str, ids: list[str], ends: list[str], content_hash: str, batch: int) -> dict[str, dict]:
    from access.services import api_key_lookup
    from api import fastlane
    from api.routes import BY_NAME

    lookup = api_key_lookup(secret)
    assert lookup is not None
    prefix, digest = lookup
    headers = {b"authorization": f"Bearer {secret}".encode()}
    held = f'"{content_hash}"'
    groups = [ids[n : n + batch] for n in range(0, len(ids) - batch + 1, batch)]
    end_groups = [ends[n : n + batch] for n in range(0, len(ends) - batch + 1, batch)]

    def batched(kind: str, inm: str | None = None) -> Callable[[list[str]], None]:
        route = BY_NAME[kind]
        call_headers = {**headers, b"if-none-match": inm.encode()} if inm else headers

        def run(group: list[str]) -> None:
            calls = [fastlane.Call(kind, sid, prefix, digest, inm) for sid in group]
            answers = fastlane.serve_calls(calls)
            # What the batch leaves (the key's last_used_at write due, say) goes one by one, as
            # in the fast lane.
            for n, answer in enumerate(answers):
                if answer is None:
                    call = calls[n]
                    answers[n] = fastlane.serve(
                        route=route, session_id=call.session_id, headers=call_headers, counted=call.counted
                    )
            assert all(a is not None and a.status in (200, 304) for a in answers), [
                a and (a.status, a.body[:200]) for a in answers
            ]

        return run

    def one_by_one(kind: str, inm: str | None = None) -> Callable[[str], None]:
        route = BY_NAME[kind]
        call_headers = {**headers, b"if-none-match": inm.encode()} if inm else headers

        def run(sid: str) -> None:
            answer = fastlane.serve(route=route, session_id=sid, headers=call_headers)
            assert answer.status in (200, 304), (answer.status, answer.body[:200])

        return run

    return {
        "fetch, batch": timed(batched("bundle"), groups),
        "fetch, one by one": timed(one_by_one("bundle"), ids),
        "304, batch": timed(batched("bundle", held), groups),
        "304, one by one": timed(one_by_one("bundle", held), ids),
        "heartbeat, batch": timed(batched("heartbeat"), groups),
        "heartbeat, one by one": timed(one_by_one("heartbeat"), ids),
        "end, batch": timed(batched("end"), end_groups),
    }


def serializers_against_functions(session_id: str) -> dict[str, float]:
    """Microseconds per call: SessionOut(...).data and session_out, SessionIn's validation and
    session_in, on one real session and a plain start body (the best of five repeats)."""
    import timeit

    from api.views.sessions import SessionIn, SessionOut, session_in, session_out
    from sessions_app.models import Session

    session = Session.objects.select_related("bundle", "version").defer("version__canonical").get(pk=session_id)
    body = {"bundle": session.bundle.name, "label": "production"}
    assert dict(SessionOut(session).data) == session_out(session) and session_in(body) == body

    def drf_in() -> object:
        serializer = SessionIn(data=body)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    runs = {
        "SessionOut(session).data": lambda: SessionOut(session).data,
        "session_out(session)": lambda: session_out(session),
        "SessionIn, validated": drf_in,
        "session_in(body)": lambda: session_in(body),
    }
    return {name: min(timeit.repeat(run, number=2000, repeat=5)) / 2000 * 1e6 for name, run in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8, help="calls per batch (default 8, as under load)")
    parser.add_argument("--batches", type=int, default=200, help="batches per kind and round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians of their medians (default 3)")
    ns = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    os.environ.setdefault("API_THROTTLE_READ", "100000000/m")
    os.environ.setdefault("API_THROTTLE_WRITE", "100000000/m")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--no-input", verbosity=0)
    sessions = ns.batch * ns.batches
    secret, ids, content_hash = setup(sessions + sessions * ns.rounds)
    live, ending = ids[:sessions], ids[sessions:]
    rounds = []
    for n in range(ns.rounds):
        ends = ending[n * sessions : (n + 1) * sessions]
        rounds.append(measure(secret, live, ends, content_hash, ns.batch))
    print(f"{'per batch of ' + str(ns.batch) + ' / per call':<24} {'wall ms':>9} {'cpu ms':>9}")
    for kind in rounds[0]:
        wall = statistics.median(r[kind]["wall_ms"] for r in rounds)
        cpu = statistics.median(r[kind]["cpu_ms"] for r in rounds)
        print(f"{kind:<24} {wall:9.3f} {cpu:9.3f}")
    print(f"\n{'one call':<26} {'us':>8}")
    for name, micros in serializers_against_functions(live[0]).items():
        print(f"{name:<26} {micros:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
