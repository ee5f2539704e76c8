"""The render's own cost, in process, beside the pinned fetch's: no HTTP, no server, warm caches.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/render.py [--calls 2000]

Creates (in the database DATABASE_URL names) a pack with two domains, a bundle whose version
declares variables and lists the pack, and one session; then times, per call, p50 and p99 of:

  fetch   sessions_app.services.session_use + sessions_app.selectors.pinned_bundle_body
  render  knowledge.render.session_render (+ Rendered.body()), warm prefix cache
  miss    the same with the prefix cache emptied before each call (a DUTY.md edit, a new domain)

`make bench` measures the same calls over HTTP (its "POST render" scenario); this isolates what
the render adds to the per-turn read."""

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-render-not-secret-" + "x" * 40)
os.environ.setdefault("DJANGO_SECURE", "0")

import django  # noqa: E402

django.setup()

from access.actors import SYSTEM  # noqa: E402
from knowledge import render, services  # noqa: E402
from registry.services import bundle_create, label_move, version_publish  # noqa: E402
from sessions_app.selectors import pinned_bundle_body  # noqa: E402
from sessions_app.services import session_start, session_use  # noqa: E402


def timed(call: Callable[[], object], calls: int) -> tuple[float, float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    pack = services.pack_create(name=f"bench-kb-{tag}", actor=SYSTEM)
    services.file_put(pack=pack, path="sre/DUTY.md", content="Start with the runbooks.\n" * 40, actor=SYSTEM)
    services.file_put(pack=pack, path="sre/runbooks/disk.md", content="df -h\n" * 100, actor=SYSTEM)
    services.file_put(pack=pack, path="billing/DUTY.md", content="Refund rules.\n" * 20, actor=SYSTEM)
    bundle = bundle_create(name=f"bench-render-{tag}", actor=SYSTEM)
    content = {
        "system_prompt": "You serve {{customer}}.\n" + "Be precise and brief. " * 200,
        "tools": [
            {"name": f"tool_{i}", "description": "Does a thing. " * 10, "input_schema": {"type": "object"}}
            for i in range(10)
        ],
        "variables": {
            "customer": {"type": "string", "required": True},
            "ticket": {"type": "string", "scope": "turn"},
        },
        "knowledge": [pack.name],
    }
    version = version_publish(bundle=bundle, content=content, message="bench", actor=SYSTEM).version
    label_move(bundle=bundle, name="production", version=version, actor=SYSTEM, reason="bench")
    session, _ = session_start(bundle=bundle, actor=SYSTEM, variables={"customer": "Acme"})

    def fetch() -> object:
        return pinned_bundle_body(session_use(session_id=session.pk, actor=SYSTEM))

    def turn() -> object:
        return render.session_render(session_id=session.pk, actor=SYSTEM, variables={"ticket": "T-1"}).body()

    def miss() -> object:
        render.prefix_cache_clear()
        return turn()

    for call in (fetch, turn, miss):  # warm connections, caches, prepared plans
        for _ in range(50):
            call()
    size = len(render.session_render(session_id=session.pk, actor=SYSTEM).prefix.body)
    print(f"{args.calls} calls each, in process; prefix {size} bytes (10 tools + 4 file tools, 2 DUTY.md)")
    for name, call in (("fetch", fetch), ("render", turn), ("render, cache miss", miss)):
        p50, p99 = timed(call, args.calls)
        print(f"{name:20} p50 {p50:8.0f} us   p99 {p99:8.0f} us")


if __name__ == "__main__":
    main()
