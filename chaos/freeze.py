"""Worker freeze (issue 18): hostile patterns under bounded load while a probe times /healthz.

Before the fix one request froze a web worker: a grep compile bomb (`(?:a{60000}){60000}`
allocated gigabytes in `regex.compile`), a backtracking grep, and a publisher's trigger such as
`(a+)+$` run by Python's `re` on 4,000 characters of end-user text, holding the GIL so that
the event loop, the fast lane and every thread of that worker stopped (for hours at that length).

Here a pack with a large file, a version whose triggers are catastrophic for a backtracking
engine, and a version "published before the rule" (through the service with the publish check
switched off, as the code before it would have accepted it: a backreference RE2 cannot run) are
hit by `threads` hostile clients for `seconds`: grep bombs and near-limit patterns, glob bombs,
route calls whose newest message is 4,000 characters that make those triggers backtrack. A probe
GETs /healthz every 100 ms. Figures: the hostile answers by status (no 5xx, no dropped
connection), the probe's p50 / max latency, the watchdog exits seen in the web log, and
"worker freeze": `none` when no probe waited `FREEZE_BOUND` seconds or more and no worker was
restarted."""

import json
import os
import random
import subprocess
import threading
import time
import urllib.parse
from collections import Counter
from typing import Any

from chaos.client import Api, Row, content, percentile
from chaos.stack import PY, ROOT, Stack

# Seconds: a /healthz probe this slow (or failing) counts as a freeze. Before the fix a frozen
# worker never answered; here the hostile load saturates the CPU (RE2 searches with the GIL
# released), which costs the probe a few hundred milliseconds on a busy 2-core machine.
FREEZE_BOUND = 2.0
BACKTRACKING = ["(a+)+$", "(a|aa)+$", "(?:a*)*b"]  # exponential on Python's re, linear on RE2
EVIL_MESSAGE = "a" * 3999 + "!"  # the router looks at 4,000 characters


def _card(name: str, triggers: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "summary": "Use when testing freezes",
        "description": "A skill whose triggers a backtracking engine would choke on.",
        "keywords": ["freeze", "probe", "chaos"],
        "category": "general",
        "examples": ["freeze the worker", "probe it"],
        "level": "L2",
        "triggers": triggers,
    }


# Run by `manage.py shell`: publish as the code before the trigger rule did (every trigger that
# Python's re compiles), so the scenario holds a version the new publish check would refuse.
_LEGACY_PUBLISH = """
import json, sys
from unittest import mock
import registry.skills_content as sc
from access.actors import SYSTEM
from registry import services
doc = json.loads(sys.stdin.read())
bundle = services.bundle_create(name="freeze-legacy", actor=SYSTEM)
with mock.patch.object(sc, "trigger_problem", lambda p: None, create=True), \\
        mock.patch.object(sc, "trigger_program_size", lambda p: 0, create=True):
    services.version_publish(bundle=bundle, content=doc, message="published before the rule", actor=SYSTEM)
print("published")
"""


def _setup(stack: Stack, api: Api) -> tuple[str, str]:
    api.ok("POST", "/api/v1/knowledge/", {"name": "freeze-pack"})
    rng = random.Random(18)
    files = {
        "big/random.txt": "".join(rng.choice("abcdefgh \n") for _ in range(600_000)),
        "big/aaaa.txt": "a" * 200_000 + "!\n",
        "ops/DUTY.md": "# Ops\n\nStart here.\n",
    }
    for path, text in files.items():
        api.ok("PUT", f"/api/v1/knowledge/freeze-pack/files/{path}", {"content": text})
    api.ok("POST", "/api/v1/bundles/", {"name": "freeze-bot"})
    doc = {**content("freeze-bot v1"), "knowledge": ["freeze-pack"], "skills": [_card("freeze_probe", BACKTRACKING)]}
    api.ok("POST", "/api/v1/bundles/freeze-bot/versions/", {"content": doc, "message": "v1"})
    legacy = {**content("freeze-legacy v1"), "skills": [_card("legacy_probe", ["(a|a)+\\1$", "(a+)+\\1"])]}
    out = subprocess.run(
        [PY, "manage.py", "shell", "-c", _LEGACY_PUBLISH],
        cwd=ROOT,
        env=stack.env,
        input=json.dumps(legacy),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "published" not in out.stdout:
        raise RuntimeError(f"the legacy publish failed: {out.stderr[-1500:]}")
    bot = api.ok("POST", "/api/v1/sessions/", {"bundle": "freeze-bot", "version": 1})["id"]
    old = api.ok("POST", "/api/v1/sessions/", {"bundle": "freeze-legacy", "version": 1})["id"]
    return bot, old


def _hostile_requests(bot: str, old: str) -> list[tuple[str, str, bytes | None]]:
    def grep(pattern: str, path: str = "knowledge/") -> tuple[str, str, None]:
        query = urllib.parse.urlencode({"pattern": pattern, "path": path})
        return "GET", f"/api/v1/sessions/{bot}/knowledge/grep?{query}", None

    def glob(pattern: str) -> tuple[str, str, None]:
        return "GET", f"/api/v1/sessions/{bot}/knowledge/glob?{urllib.parse.urlencode({'pattern': pattern})}", None

    def route(session: str) -> tuple[str, str, bytes]:
        body = json.dumps({"messages": [{"role": "user", "content": EVIL_MESSAGE}]}).encode()
        return "POST", f"/api/v1/sessions/{session}/route/", body

    return [
        grep("(?:a{60000}){60000}"),
        grep("((a{100}){100}){100}"),
        grep("(a|aa)+$", "knowledge/freeze-pack/big/aaaa.txt"),
        grep("(a+)+$"),
        grep("(?s)a.{0,90}b.{0,90}c.{0,90}d.{0,90}x"),  # near the size bound, RE2's slow path
        grep("(\\w+)\\s\\1"),
        grep("x" * 5000),
        glob("knowledge/" + "*a" * 31 + "*"),
        glob("**/" + "*" * 40),
        glob("knowledge/{" + ",".join(f"n{i}" for i in range(200)) + "}"),
        route(bot),
        route(old),
    ]


def freeze(stack: Stack, api: Api, *, threads: int, seconds: float) -> list[Row]:
    bot, old = _setup(stack, api)
    requests = _hostile_requests(bot, old)
    log = stack.procs["web"].log
    exits_before = log.read_text(errors="replace").count("Timeout (0:")
    statuses: Counter[int] = Counter()
    wrong_shape = 0
    lock = threading.Lock()
    stop = threading.Event()
    probes: list[float] = []
    probe_at: list[float] = []
    slowest: Counter[str] = Counter()  # request kind -> its slowest answer in ms
    kinds: dict[str, Counter[int]] = {}

    def hostile(n: int) -> None:
        nonlocal wrong_shape
        client = Api(stack.web_port, stack.ops_key, timeout=30)
        i = n
        while not stop.is_set():
            method, path, body = requests[i % len(requests)]
            i += 1
            headers = {"Content-Type": "application/json"} if body else {}
            began = time.monotonic()
            status, data, _ = client.raw(method, path, body, headers)
            took = time.monotonic() - began
            kind = path.split("/")[-1][:40]
            bad_shape = False
            if status >= 400:
                try:
                    bad_shape = set(json.loads(data)["error"]) != {"code", "message", "details"}
                except (ValueError, KeyError, TypeError):
                    bad_shape = True
            with lock:
                statuses[status] += 1
                wrong_shape += bad_shape
                slowest[kind] = max(slowest[kind], int(took * 1000))
                kinds.setdefault(kind, Counter())[status] += 1
        client.close()

    def probe() -> None:
        while not stop.is_set():
            client = Api(stack.web_port, stack.ops_key, timeout=15)  # a new connection: any worker may take it
            began = time.monotonic()
            status, _, _ = client.raw("GET", "/healthz")
            probes.append(time.monotonic() - began if status == 200 else 99.0)
            probe_at.append(began - started)
            client.close()
            time.sleep(0.1)

    workers = [threading.Thread(target=hostile, args=(n,), daemon=True) for n in range(threads)]
    workers.append(threading.Thread(target=probe, daemon=True))
    started = time.monotonic()
    for t in workers:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in workers:
        t.join(40)
    if os.environ.get("CHAOS_VERBOSE"):
        print("slowest answer per request (ms):", dict(slowest.most_common()), kinds)
        slow_probes = [(round(a, 1), round(p, 2)) for a, p in zip(probe_at, probes, strict=False) if p > 0.3]
        print("slow probes (at s, took s):", slow_probes)
    exits = log.read_text(errors="replace").count("Timeout (0:") - exits_before
    total = sum(statuses.values())
    bad = sum(n for status, n in statuses.items() if status >= 500 or status == 0)
    slow = sum(latency >= FREEZE_BOUND for latency in probes)
    unanswered = statuses.get(0, 0)
    # A frozen worker stops taking new connections (granian's acceptor needs the GIL), so a
    # probe on a new connection reaches the other worker: requests left unanswered and watchdog
    # exits count as freezes too.
    frozen = (
        "none"
        if slow == 0 and exits == 0 and unanswered == 0 and probes
        else f"{slow} probes >= {FREEZE_BOUND:g} s; {unanswered} unanswered; {exits} watchdog exits"
    )
    return [
        ("worker freeze", "hostile requests; 5xx or no answer", f"{total}; {bad}", bad == 0 and total > 0),
        ("worker freeze", "answers by status", ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())), None),
        ("worker freeze", "errors not in the contract's shape", str(wrong_shape), wrong_shape == 0),
        (
            "worker freeze",
            f"/healthz probes: count, p50 / max ({threads} hostile threads)",
            f"{len(probes)}, {percentile(probes, 50) * 1000:.0f} / {max(probes, default=0) * 1000:.0f} ms",
            None,
        ),
        ("worker freeze", "watchdog exits in the web log", str(exits), exits == 0),
        ("worker freeze", f"worker freeze (a probe >= {FREEZE_BOUND:g} s)", frozen, frozen == "none"),
    ]
