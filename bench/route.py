"""Routing latency for 100 skills, in process (the router alone, warm index): p50 and p99.

    .venv/bin/python bench/route.py [--skills 100] [--turns 2000] [--lexical] [--calls 1]
        [--base TREE [--rounds 6]]

Builds 100 cards from eval/routing/skills.json (renamed copies past its 62), replays its
conversations' user messages (English, Chinese, mixed; with the two previous turns as context)
through skills.router with the semantic path on (--lexical: off), and prints the distribution.
The goal (issue 22): p50 <= 1 ms and p99 <= 5 ms; printed, not asserted (a shared machine's
wall time is mostly waiting for a core, so the thread's CPU time is printed too).

The offline models' vectors of the newest message are dropped before each timed call (in
service each turn brings a new message; the earlier turns' texts were embedded by the previous
call and are cached, here as there), and so is what the index keeps of a routed text
(`Index.forget_turns`). `--calls N`: each message is routed N times in a row, the first as a
new message and the others as an agent's further model calls within one user message route it
(nothing dropped). The process's resident memory is printed before the
offline models load, before the index is built and after the warm-up.

`--base TREE`: the router of another tree (TREE/skills/router.py, a worktree of the commit
before; the rest of the package from this tree) against this one, in this process: `--rounds`
rounds of `--turns` calls each, alternating which goes first, and the CPU per call of each
(medians of the rounds' means) and their ratio.
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.text import warm_up  # noqa: E402
from skills.embedding import local_model, piece_model  # noqa: E402
from skills.params import RouterParams  # noqa: E402
from skills.router import History, Index  # noqa: E402


def resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def new_message(index: Any, messages: list[dict[str, str]], offline: list[Any]) -> None:
    """As in service, a new message: its vectors dropped from every model's cache, and what the
    index keeps of routed texts (a tree without it has nothing to drop)."""
    for model_cache in [m._cache for m in offline]:
        model_cache.pop(messages[-1]["content"], None)
    getattr(index, "forget_turns", lambda: None)()


def compare(args: Any, skills: list[Any], histories: list[Any], params: Any, history: Any, offline: list[Any]) -> None:
    spec = importlib.util.spec_from_file_location("base_router", Path(args.base) / "skills" / "router.py")
    assert spec is not None and spec.loader is not None
    base = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = base  # dataclasses look their module up (a field annotated "_Turn")
    spec.loader.exec_module(base)
    indexes = {"base": base.Index(skills, None, params), "this": Index(skills, None, params)}
    for index in indexes.values():
        for messages in histories:  # warm
            index.route(messages, k=5, history=history)
    means: dict[str, list[float]] = {name: [] for name in indexes}
    for r in range(args.rounds):
        for name in list(indexes)[:: 1 if r % 2 == 0 else -1]:
            index, total = indexes[name], 0.0
            for n in range(args.turns):
                messages = histories[n // args.calls % len(histories)]
                if n % args.calls == 0:
                    new_message(index, messages, offline)
                started = time.thread_time()
                index.route(messages, k=5, history=history)
                total += time.thread_time() - started
            means[name].append(total / args.turns * 1e6)
    old, new = statistics.median(means["base"]), statistics.median(means["this"])
    what = f"each message routed {args.calls} times in a row" if args.calls > 1 else "a new message each call"
    print(f"router CPU per call, {what}, {len(skills)} skills, medians of {args.rounds} rounds of {args.turns}:")
    print(f"  base ({args.base}) {old:.1f} us   this tree {new:.1f} us   ratio {new / old:.3f}")
    print("  rounds, base:", " ".join(f"{v:.0f}" for v in means["base"]))
    print("  rounds, this:", " ".join(f"{v:.0f}" for v in means["this"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skills", type=int, default=100)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--lexical", action="store_true", help="the semantic path off")
    parser.add_argument("--calls", type=int, default=1, help="calls per message (an agent's model calls)")
    parser.add_argument("--base", help="a tree whose skills/router.py to compare with, in this process")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    base = json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())
    skills = [s for s in base if s["level"] == "L1"]
    routed = [s for s in base if s["level"] == "L2"]
    i = 0
    while len(skills) < args.skills:
        card = dict(routed[i % len(routed)])
        if i >= len(routed):
            card["name"] = f"{card['name']}_{i // len(routed)}"
        skills.append(card)
        i += 1
    conversations = json.loads((ROOT / "eval" / "routing" / "conversations.json").read_text())
    histories = []
    for conversation in conversations:
        messages: list[dict[str, str]] = []
        for turn in conversation["turns"]:
            messages = [*messages, {"role": "user", "content": turn["user"]}]
            histories.append(messages)
            messages = [*messages, {"role": "assistant", "content": "Done."}]
    params = RouterParams(semantic=not args.lexical)
    warm_up()
    rss_start = resident_mb()
    offline = [local_model(), piece_model()]
    rss_before = resident_mb()
    index = Index(skills, None, params)
    history = History(loaded=[frozenset({"track_parcel"})] * 2, invoked=[frozenset(), frozenset()])
    if args.base:
        compare(args, skills, histories, params, history, offline)
        return
    for messages in histories:  # warm: jieba's dictionary, regex caches
        index.route(messages, k=5, history=history)
    rss_after = resident_mb()
    samples = []
    cpu = []
    for n in range(args.turns):
        messages = histories[n // args.calls % len(histories)]
        if n % args.calls == 0:
            new_message(index, messages, offline)
        started, started_cpu = time.perf_counter(), time.thread_time()
        index.route(messages, k=5, history=history)
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - started_cpu) * 1000)
    samples.sort()
    cpu.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    # Wall time includes waiting for a core; on a shared, loaded machine the CPU time of the
    # routing thread is the figure that says what the router itself costs.
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"cpu time: p50 {statistics.median(cpu):.3f} ms  p99 {cpu[int(len(cpu) * 0.99) - 1]:.3f} ms"
        f"  (load average {load:.1f} on {os.cpu_count()} cores)"
    )
    build = time.perf_counter()
    Index(skills, None, params)
    build_ms = (time.perf_counter() - build) * 1000
    mode = "lexical only" if args.lexical else "semantic path on"
    print(
        f"skills {len(skills)} ({mode})  turns {len(samples)}  p50 {p50:.3f} ms  p99 {p99:.3f} ms"
        f"  max {samples[-1]:.3f} ms"
    )
    print(f"index build (once per content hash per process, card vectors included): {build_ms:.1f} ms")
    print(
        f"resident memory: {rss_start:.0f} MB with jieba, {rss_before:.0f} MB with the two offline models,"
        f" {rss_after:.0f} MB after the warm-up (+{rss_after - rss_before:.0f} MB)"
    )
    print("goal p50 <= 1 ms, p99 <= 5 ms (wall):", "met" if p50 <= 1 and p99 <= 5 else "not met on this run")


if __name__ == "__main__":
    main()
