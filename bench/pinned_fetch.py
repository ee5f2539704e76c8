"""Benchmark the hot path: fetching a session's pinned bundle, revalidating it, starting sessions.

Starts the service the way `make run` does (embedded PostgreSQL and Redis from devtools.stack
unless DATABASE_URL / REDIS_URL are set, migrate, `python -m edge.serve` (granian, ASGI) with WEB_CONCURRENCY
workers, a Celery worker), creates a bundle, a production label, an agent key and N
sessions through the REST API, then drives 127.0.0.1 with wrk and prints requests/s and
p50/p99 latency for:

  a. GET  /api/v1/sessions/{id}/bundle/                      expects 200, spread over the sessions
  b. the same with If-None-Match: "<content_hash>"           expects 304
  c. POST /api/v1/sessions/ {"bundle": ...}                  expects 201
  d. POST /api/v1/sessions/{id}/render/ {"variables": ...}   expects 200: the per-turn render of
     a version with session and turn variables and a knowledge pack (two domains, a DUTY.md)
  e. POST /api/v1/sessions/{id}/turn/ (when this build has it): one call per agent turn on a
     version with 100 skills and one pack, a 20-message history with 8 tool results,
     format anthropic, the prefix_sha256 the client holds
  f. the same turns as today's sequence: render, route, turns, compact and the pinned fetch
     (304), five requests in rotation; turns/s, latency and web CPU are also printed per turn

Every status wrk receives is counted by a Lua `response` hook; anything unexpected, and any
socket error, is reported and makes the exit status 1. Everything started is stopped at the
end, also on Ctrl-C. Raw wrk output and server logs go to bench/results/<time>/.

    make bench ARGS="--duration 10 --connections 16"
"""

import argparse
import json
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script (`python bench/pinned_fetch.py`), not a module

import slow_clients  # noqa: E402  (bench/slow_clients.py, beside this script)

from devtools.stack import free_port, start_services, stop_services, web_command  # noqa: E402

BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
RESULTS_LOG = ROOT / "bench" / "results.jsonl"  # one JSON line per run, committed with the figures it backs
BENCH_DATABASE = "registry_bench"  # on the embedded server: ours alone, recreated each run
HTTP_TIMEOUT = 10  # seconds, for every set-up request the script makes itself
WRK_TIMEOUT = "5s"  # a request slower than this counts as a wrk timeout error


@dataclass
class Scenario:
    title: str
    method: str
    paths: list[str]
    expected: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    # A mix: request i is (methods[i], paths[i], bodies[i]); empty means `method` and `body` for all.
    methods: list[str] = field(default_factory=list)
    bodies: list[str | None] = field(default_factory=list)
    also_ok: tuple[int, ...] = ()  # statuses expected besides `expected` (a 304 in a mix)
    per_turn: int = 1  # requests that make one agent turn: the figures per turn divide by it


@dataclass
class Result:
    scenario: Scenario
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    statuses: dict[int, int]
    socket_errors: dict[str, int]
    raw: str
    server_cpu_us: float = 0.0  # CPU time of the server's processes per request (less noisy than req/s)
    # The whole machine's CPU per request during the run, by who spent it (machine_cpu_seconds):
    # on 2 shared cores, requests/s follows the sum, not the server's part alone.
    machine_cpu_us: dict[str, float] = field(default_factory=dict)

    @property
    def unexpected(self) -> dict[int, int]:
        ok = {self.scenario.expected, *self.scenario.also_ok}
        return {code: n for code, n in self.statuses.items() if code not in ok}

    @property
    def ok(self) -> bool:
        return not self.unexpected and not any(self.socket_errors.values())


# --- the content document -------------------------------------------------------------------


def content_document() -> dict[str, Any]:
    """A realistic bundle: a long system prompt, several tools with schemas, guardrails, an
    output schema, model settings and metadata; about 12 KB of canonical JSON."""
    policy = [
        "You are the customer support agent for Acme Outdoor, a retailer of camping and hiking gear.",
        "Answer in the customer's language, in plain sentences, without marketing language.",
        "Before saying anything about an order, look it up with `lookup_order`; never guess a status,"
        " a delivery date or an amount.",
        "Refunds: an order delivered less than 30 days ago can be refunded in full if the items are"
        " unused. Call `process_refund` only after the customer has confirmed the amount and the"
        " items. Refunds over 500 EUR need a human: call `escalate` with reason `refund_over_limit`.",
        "Exchanges: offer an exchange before a refund when the item is available in another size or"
        " colour; check stock with `check_stock`.",
        "Shipping: standard delivery takes 3 to 5 working days, express 1 to 2. Lost parcels are"
        " investigated after 10 working days; open a carrier claim with `open_claim`.",
        "Never share another customer's data, internal notes, supplier names or margins. Do not"
        " promise discounts; you may apply the goodwill voucher (10 EUR) once per order with"
        " `apply_voucher`, and say so.",
        "If the customer is angry, acknowledge the problem in one sentence, then move to what you"
        " can do. If they ask for a person, call `escalate` with reason `customer_request`.",
        "Safety: for questions about gas stoves, lithium batteries or avalanche equipment, give"
        " only the manufacturer's instructions linked from the product page and recommend"
        " contacting the manufacturer.",
        "End each conversation by summarising what was done and what happens next, with dates.",
    ]
    examples = "\n".join(
        f"Example {n}: customer asks about order A{10000 + n * 37}; look it up, report the status and the"
        f" next step, and offer help with anything else."
        for n in range(1, 41)
    )
    system_prompt = "\n\n".join(policy) + "\n\nWorked examples:\n" + examples

    def tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "description": description,
            "input_schema": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        }

    order_id = {"type": "string", "pattern": "^A[0-9]{5,8}$", "description": "Order number, e.g. A10037."}
    tools = [
        tool(
            "lookup_order",
            "Find an order by its number: items, status, dates, amounts.",
            {"order_id": order_id},
            ["order_id"],
        ),
        tool(
            "process_refund",
            "Refund some or all items of an order to the original payment method.",
            {
                "order_id": order_id,
                "items": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "amount_eur": {"type": "number", "exclusiveMinimum": 0, "maximum": 500},
                "reason": {"type": "string", "enum": ["unused_return", "damaged", "late", "goodwill"]},
            },
            ["order_id", "items", "amount_eur", "reason"],
        ),
        tool(
            "check_stock",
            "Stock of a product variant in the central warehouse.",
            {"sku": {"type": "string"}, "size": {"type": "string"}, "colour": {"type": "string"}},
            ["sku"],
        ),
        tool(
            "open_claim",
            "Open a claim with the carrier for a lost or damaged parcel.",
            {
                "order_id": order_id,
                "kind": {"type": "string", "enum": ["lost", "damaged"]},
                "notes": {"type": "string"},
            },
            ["order_id", "kind"],
        ),
        tool(
            "apply_voucher",
            "Apply the one-off 10 EUR goodwill voucher to an order.",
            {"order_id": order_id},
            ["order_id"],
        ),
        tool(
            "escalate",
            "Hand the conversation to a person, with a reason and a summary.",
            {
                "reason": {"type": "string", "enum": ["refund_over_limit", "customer_request", "safety", "other"]},
                "summary": {"type": "string", "maxLength": 2000},
            },
            ["reason", "summary"],
        ),
    ]
    return {
        "system_prompt": system_prompt,
        "tools": tools,
        "guardrails": {
            "default": "allow",
            "rules": [
                {"tool": "process_refund", "effect": "confirm", "reason": "Money leaves the company."},
                {"tool": "escalate", "effect": "allow"},
            ],
        },
        "output_schema": {
            "type": "object",
            "properties": {
                "reply": {"type": "string"},
                "actions": {"type": "array", "items": {"type": "string"}},
                "needs_human": {"type": "boolean"},
            },
            "required": ["reply", "needs_human"],
        },
        "model": {"name": "support-large-2025-06", "temperature": 0.2, "top_p": 0.9, "max_output_tokens": 1024},
        "metadata": {"owner": "support-platform", "ticket": "SUP-1432", "locale_fallback": "en"},
    }


# --- processes ------------------------------------------------------------------------------


class Processes:
    """Children started in their own sessions, so that a Ctrl-C reaches only this script, which
    then stops them in order: web and worker first, the database and Redis last."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def start(self, argv: list[str], log: Path) -> subprocess.Popen:
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.running.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        for proc in self.running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.running.clear()


def manage(*args: str) -> str:
    done = subprocess.run(
        [str(BIN / "python"), "manage.py", *args], cwd=ROOT, check=True, capture_output=True, text=True, timeout=300
    )
    return done.stdout


def recreate_database(url: str) -> None:
    """Drop and create the database in `url`, so that every run starts from the same state and
    from the current migrations (which others may be rewriting)."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def wait_until_ready(base: str, web: subprocess.Popen, log: Path, timeout: float = 60, path: str = "/readyz") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if web.poll() is not None:
            raise SystemExit(f"the web server exited with status {web.returncode}; see {log}")
        try:
            with urllib.request.urlopen(base + path, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise SystemExit(f"the web server did not become ready within {timeout:.0f}s; see {log}")


# --- the API --------------------------------------------------------------------------------


def call(
    base: str, method: str, path: str, key: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def expect(status: int, wanted: int, what: str, body: bytes) -> None:
    if status != wanted:
        raise SystemExit(f"{what}: expected {wanted}, got {status}: {body[:500].decode(errors='replace')}")


def create_data(base: str, *, ops_key: str, agent_key: str, bundle: str, sessions: int) -> tuple[list[str], str, int]:
    """Bundle, version 1, production label and `sessions` sessions. Returns (session ids,
    content hash, size of the pinned-bundle body)."""
    status, _, body = call(base, "POST", "/api/v1/bundles/", ops_key, {"name": bundle, "description": "benchmark"})
    expect(status, 201, "create the bundle", body)
    version_body = {"content": content_document(), "message": "benchmark content"}
    status, _, body = call(base, "POST", f"/api/v1/bundles/{bundle}/versions/", ops_key, version_body)
    expect(status, 201, "publish version 1", body)
    version = json.loads(body)
    label_body = {"version": version["number"], "reason": "benchmark"}
    status, _, body = call(base, "PUT", f"/api/v1/bundles/{bundle}/labels/production/", ops_key, label_body)
    expect(status, 201, "create the production label", body)

    ids = []
    for _ in range(sessions):
        status, _, body = call(base, "POST", "/api/v1/sessions/", agent_key, {"bundle": bundle})
        expect(status, 201, "start a session", body)
        ids.append(json.loads(body)["id"])

    # What the scenarios will assert, checked once by hand first.
    status, headers, body = call(base, "GET", f"/api/v1/sessions/{ids[0]}/bundle/", agent_key)
    expect(status, 200, "fetch a pinned bundle", body)
    etag = headers.get("ETag") or headers.get("etag")  # the ASGI lane sends header names in lower case
    if etag != f'"{version["content_hash"]}"':
        raise SystemExit(f"the pinned bundle's ETag is {etag!r}, expected the content hash {version['content_hash']!r}")
    status, _, not_modified = call(
        base, "GET", f"/api/v1/sessions/{ids[-1]}/bundle/", agent_key, headers={"If-None-Match": etag}
    )
    expect(status, 304, "revalidate a pinned bundle", not_modified)
    return ids, version["content_hash"], len(body)


def create_render_data(base: str, *, ops_key: str, agent_key: str, bundle: str, sessions: int) -> list[str]:
    """A version with variables that lists a knowledge pack, and `sessions` sessions on it."""
    pack = f"{bundle}-kb"
    status, _, body = call(base, "POST", "/api/v1/knowledge/", ops_key, {"name": pack})
    expect(status, 201, "create the knowledge pack", body)
    files = {
        "sre/DUTY.md": "# SRE\n\nIncidents: start with knowledge/" + pack + "/sre/runbooks/.\n" * 20,
        "sre/runbooks/disk-full.md": "Check df -h, rotate logs.\n" * 50,
        "billing/DUTY.md": "Refunds over 100 EUR need a second pair of eyes.\n",
    }
    for path, text in files.items():
        status, _, body = call(base, "PUT", f"/api/v1/knowledge/{pack}/files/{path}", ops_key, {"content": text})
        expect(status, 201, f"write {path}", body)
    document = content_document()
    document["system_prompt"] = "You serve {{customer}} ({{tier}}).\n\n" + document["system_prompt"]
    document["knowledge"] = [pack]
    document["variables"] = {
        "customer": {"type": "string", "required": True},
        "tier": {"type": "enum", "values": ["free", "pro"], "default": "free"},
        "ticket": {"type": "string", "scope": "turn"},
    }
    status, _, body = call(base, "POST", "/api/v1/bundles/", ops_key, {"name": bundle})
    expect(status, 201, "create the render bundle", body)
    status, _, body = call(
        base, "POST", f"/api/v1/bundles/{bundle}/versions/", ops_key, {"content": document, "message": "render"}
    )
    expect(status, 201, "publish the render version", body)
    status, _, body = call(
        base, "PUT", f"/api/v1/bundles/{bundle}/labels/production/", ops_key, {"version": 1, "reason": "bench"}
    )
    expect(status, 201, "label the render version", body)
    ids = []
    for i in range(sessions):
        start = {"bundle": bundle, "variables": {"customer": f"customer {i}"}}
        status, _, body = call(base, "POST", "/api/v1/sessions/", agent_key, start)
        expect(status, 201, "start a render session", body)
        ids.append(json.loads(body)["id"])
    status, _, body = call(
        base, "POST", f"/api/v1/sessions/{ids[0]}/render/", agent_key, {"variables": {"ticket": "T"}}
    )
    expect(status, 200, "render a turn", body)
    return ids


def skill_cards(count: int = 100) -> list[dict[str, Any]]:
    """`count` cards from eval/routing/skills.json (renamed copies of its L2 cards past its 62)."""
    base = json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())
    cards = list(base)
    routed = [card for card in base if card["level"] == "L2"]
    i = 0
    while len(cards) < count:
        card = dict(routed[i % len(routed)])
        card["name"] = f"{card['name']}_{i // len(routed) + 2}"
        cards.append(card)
        i += 1
    return cards[:count]


def turn_history() -> list[dict[str, Any]]:
    """A 20-message conversation in the neutral (chat) shape with 8 tool results of about 1.2 KB."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "My parcel for order A10417 never arrived."},
        {"role": "assistant", "content": "Sorry to hear that. I will check the order and its parcels."},
    ]
    for n in range(8):
        call_id = f"call_{n}"
        arguments = json.dumps({"order_id": f"A{10417 + n}"})
        messages.append(
            {
                "role": "assistant",
                "content": "Let me look that up.",
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "lookup_order", "arguments": arguments}}
                ],
            }
        )
        log = "\n".join(
            f"2026-11-30T10:{m:02d}:00Z order A{10417 + n} scan {m} depot=LYS status=in_transit" for m in range(20)
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": log})
    messages.append({"role": "assistant", "content": "The parcel is held at the Lyon depot since Monday."})
    messages.append({"role": "user", "content": "Then I want my money back, please refund the order."})
    assert len(messages) == 20
    return messages


def create_turn_data(
    base: str, *, ops_key: str, agent_key: str, bundle: str, sessions: int
) -> tuple[list[str], str | None, list[dict[str, Any]]]:
    """A version with 100 skills and one knowledge pack, `sessions` sessions on it, each routed
    once (so that `turns/` has a turn to report). Returns (session ids, the prefix_sha256 a
    client holds after its first turn call, or None when this build has no turn endpoint, and
    the history every turn sends)."""
    pack = f"{bundle}-kb"
    status, _, body = call(base, "POST", "/api/v1/knowledge/", ops_key, {"name": pack})
    expect(status, 201, "create the turn scenario's pack", body)
    for path, text in {
        "support/DUTY.md": "Start with the order; runbooks are under support/runbooks/.\n" * 10,
        "support/runbooks/lost-parcel.md": "Wait 10 working days, then open a carrier claim.\n" * 40,
    }.items():
        status, _, body = call(base, "PUT", f"/api/v1/knowledge/{pack}/files/{path}", ops_key, {"content": text})
        expect(status, 201, f"write {path}", body)
    document = content_document()
    document["skills"] = skill_cards(100)
    document["knowledge"] = [pack]
    status, _, body = call(base, "POST", "/api/v1/bundles/", ops_key, {"name": bundle})
    expect(status, 201, "create the turn bundle", body)
    status, _, body = call(
        base, "POST", f"/api/v1/bundles/{bundle}/versions/", ops_key, {"content": document, "message": "turn"}
    )
    expect(status, 201, "publish the turn version", body)
    status, _, body = call(
        base, "PUT", f"/api/v1/bundles/{bundle}/labels/production/", ops_key, {"version": 1, "reason": "bench"}
    )
    expect(status, 201, "label the turn version", body)
    messages = turn_history()
    ids = []
    for _ in range(sessions):
        status, _, body = call(base, "POST", "/api/v1/sessions/", agent_key, {"bundle": bundle})
        expect(status, 201, "start a turn session", body)
        session_id = json.loads(body)["id"]
        status, _, body = call(base, "POST", f"/api/v1/sessions/{session_id}/route/", agent_key, {"messages": messages})
        expect(status, 200, "route a first turn", body)
        ids.append(session_id)
    status, _, body = call(
        base, "POST", f"/api/v1/sessions/{ids[0]}/turn/", agent_key, {"messages": messages, "format": "anthropic"}
    )
    if status == 404 and b"session" not in body.lower():
        return ids, None, messages  # no such route in this build
    expect(status, 200, "take a turn in one call", body)
    return ids, json.loads(body)["prefix_sha256"], messages


# --- wrk ------------------------------------------------------------------------------------


def lua_string(value: str) -> str:
    # A JSON string is a valid Lua string literal as long as it is ASCII: json.dumps escapes
    # everything else as \uXXXX, which Lua 5.1 does not read, so refuse it rather than mangle it.
    if not value.isascii():
        raise ValueError(f"not ASCII: {value!r}")
    return json.dumps(value)


LUA_TEMPLATE = """-- Generated by bench/pinned_fetch.py: {title}
local method = {method}
local paths = {{{paths}}}
local methods = {{{methods}}}
local bodies = {{{bodies}}}
local headers = {{{headers}}}
local body = {body}
local nthreads = {nthreads}
local threads = {{}}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  statuses = {{}}
  requests = {{}}
  for i, path in ipairs(paths) do
    local h = {{}}
    for k, v in pairs(headers) do h[k] = v end
    local b = body
    if bodies[i] ~= nil then b = bodies[i] end
    if b == false then b = nil end
    requests[i] = wrk.format(methods[i] or method, path, h, b)
  end
  -- Each thread starts at its own share of the list and walks it, so that the load is spread
  -- over every session rather than hammering one row (and session ends do not repeat).
  index = math.floor(tid * #requests / nthreads)
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local totals = {{}}
  for _, thread in ipairs(threads) do
    for code, count in pairs(thread:get("statuses")) do
      totals[code] = (totals[code] or 0) + count
    end
  end
  local parts = {{}}
  for code, count in pairs(totals) do
    table.insert(parts, string.format('"%d": %d', code, count))
  end
  io.write("STATUSES {{" .. table.concat(parts, ", ") .. "}}\\n")
end
"""


def lua_script(scenario: Scenario, threads: int) -> str:
    return LUA_TEMPLATE.format(
        nthreads=threads,
        title=scenario.title,
        method=lua_string(scenario.method),
        paths=", ".join(lua_string(p) for p in scenario.paths),
        methods=", ".join(lua_string(m) for m in scenario.methods),
        bodies=", ".join("false" if b is None else lua_string(b) for b in scenario.bodies),
        headers=", ".join(f"[{lua_string(k)}] = {lua_string(v)}" for k, v in scenario.headers.items()),
        body="nil" if scenario.body is None else lua_string(scenario.body),
    )


UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def to_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if not match:
        raise ValueError(f"unexpected wrk duration {text!r}")
    return float(match.group(1)) * UNITS_MS[match.group(2)]


def parse_wrk(scenario: Scenario, output: str) -> Result:
    def find(pattern: str) -> re.Match[str]:
        match = re.search(pattern, output, flags=re.MULTILINE)
        if not match:
            raise SystemExit(f"could not find {pattern!r} in the wrk output:\n{output}")
        return match

    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    socket_line = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if socket_line:
        errors = dict(zip(errors, map(int, socket_line.groups()), strict=True))
    statuses = json.loads(find(r"^STATUSES (\{.*\})$").group(1))
    return Result(
        scenario=scenario,
        requests_per_second=float(find(r"^Requests/sec:\s+([\d.]+)").group(1)),
        p50_ms=to_ms(find(r"^\s+50%\s+(\S+)").group(1)),
        p99_ms=to_ms(find(r"^\s+99%\s+(\S+)").group(1)),
        requests=int(find(r"^\s+(\d+) requests in").group(1)),
        statuses={int(code): n for code, n in statuses.items()},
        socket_errors=errors,
        raw=output,
    )


def run_wrk(
    scenario: Scenario,
    *,
    base: str,
    threads: int,
    connections: int,
    duration: int,
    out_dir: Path,
    script_dir: Path,
    slug: str,
) -> Result:
    script = script_dir / f"{slug}.lua"  # holds the API key: kept out of bench/results
    script.write_text(lua_script(scenario, threads))
    argv = [
        "wrk",
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={duration}s",
        f"--timeout={WRK_TIMEOUT}",
        "--latency",
        f"--script={script}",
        base + "/",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"wrk did not finish within {duration + 60}s ({scenario.title})")
    (out_dir / f"{slug}.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"wrk failed ({scenario.title}):\n{done.stdout}{done.stderr}")
    return parse_wrk(scenario, done.stdout)


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10, help="seconds per scenario (default 10)")
    parser.add_argument("--connections", type=int, default=16, help="open connections held by wrk (default 16)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2, one per core here)")
    parser.add_argument("--sessions", type=int, default=200, help="sessions the fetches are spread over (default 200)")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of unreported fetches first (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians are reported (default 1)")
    parser.add_argument("--slow-clients", type=int, default=20, help="slow-body connections held (default 20)")
    parser.add_argument("--short", action="store_true", help="CI: 2 s per scenario, 50 sessions, 1 s warm-up")
    parser.add_argument("--only", help="comma-separated scenarios to run (default: all)")
    ns = parser.parse_args(argv)
    if ns.short:
        ns.duration, ns.sessions, ns.warmup, ns.rounds, ns.slow_clients = 2, 50, 1, 1, 5
    if ns.connections < ns.threads:
        parser.error("--connections must be at least --threads (wrk gives each thread one or more)")
    if min(ns.duration, ns.threads, ns.sessions, ns.rounds) < 1 or ns.warmup < 0:
        parser.error("--duration, --threads, --sessions and --rounds must be positive, --warmup not negative")
    return ns


def seed_sessions_to_end(*, bundle: str, agent_key_name: str, count: int) -> list[str]:
    """`count` active sessions of the agent key on the bundle's production version, inserted in
    one statement (generate_series), for the session-end scenario: each end must find an
    active session, as in real use."""
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        rows = conn.execute(
            """INSERT INTO sessions_app_session (id, bundle_id, version_id, label, api_key_id, status,
                   ttl_seconds, started_at, last_seen_at, expires_at, variables)
               SELECT gen_random_uuid(), b.id, l.version_id, 'production', k.id, 'active',
                   3600, now(), now(), now() + interval '3600 seconds', '{}'::jsonb
               FROM registry_bundle b JOIN registry_label l ON l.bundle_id = b.id AND l.name = 'production',
                   access_apikey k, generate_series(1, %s)
               WHERE b.name = %s AND k.name = %s
               RETURNING id""",
            [count, bundle, agent_key_name],
        ).fetchall()
    return [str(row[0]) for row in rows]


def process_rss_mb(pid: int) -> dict[str, list[float]]:
    """RSS in MB of a process tree: {"main": [...], "children": [...]}."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return {
            "main": [round(proc.memory_info().rss / 2**20, 1)],
            "children": [round(c.memory_info().rss / 2**20, 1) for c in proc.children(recursive=True)],
        }
    except psutil.Error:
        return {"main": [], "children": []}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process tree so far."""
    import psutil

    total = 0.0
    try:
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            try:
                times = p.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


# Processes other than the server that a request's CPU goes to, by their names.
_OTHERS = {"postgres": ("postgres", "pgbouncer"), "redis": ("redis-server",)}


def machine_cpu_seconds(pid: int) -> dict[str, Any]:
    """CPU seconds so far: the server's tree, PostgreSQL, Redis, the wrk client, and the
    machine's total (every core's busy time, /proc/stat through psutil)."""
    import psutil

    seconds: dict[str, Any] = {"web": process_cpu_seconds(pid), "pids": {}}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        times = proc.info["cpu_times"]
        for name, names in _OTHERS.items():
            if times is not None and (proc.info["name"] or "").startswith(names):
                seconds["pids"][proc.pid] = (name, times.user + times.system)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk: a child that has exited
    seconds["wrk"] = children.ru_utime + children.ru_stime
    busy = psutil.cpu_times()
    seconds["machine"] = sum(busy) - busy.idle - getattr(busy, "iowait", 0.0)
    return seconds


def _spent(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """CPU seconds between two machine_cpu_seconds(); a process that began between them counts
    whole, one that ended counts nothing (its share falls in "other")."""
    spent = {"web": after["web"] - before["web"], **dict.fromkeys(_OTHERS, 0.0), "wrk": after["wrk"] - before["wrk"]}
    for pid, (name, cpu) in after["pids"].items():
        was = before["pids"].get(pid)
        spent[name] += cpu - (was[1] if was and was[0] == name else 0.0)
    spent["machine"] = after["machine"] - before["machine"]
    return spent


def measured(run, pid: int) -> Result:
    """run() (a wrk run against the server `pid`), with the server's CPU per request and the
    machine's, by who spent it ("other": the machine's total less the named ones)."""
    before = machine_cpu_seconds(pid)
    result = run()
    after = machine_cpu_seconds(pid)
    per = {k: v / max(result.requests, 1) * 1e6 for k, v in _spent(before, after).items()}
    per["other"] = max(per["machine"] - sum(v for k, v in per.items() if k != "machine"), 0.0)
    result.server_cpu_us = per["web"]
    result.machine_cpu_us = per
    return result


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def median_result(results: list[Result]) -> Result:
    """The round with the median throughput (its latencies and counts go with it)."""
    ordered = sorted(results, key=lambda r: r.requests_per_second)
    chosen = ordered[len(ordered) // 2]
    statuses: dict[int, int] = {}
    errors: dict[str, int] = {}
    for r in results:  # but every unexpected status and error of every round counts
        for code, n in r.statuses.items():
            statuses[code] = statuses.get(code, 0) + n
        for kind, n in r.socket_errors.items():
            errors[kind] = errors.get(kind, 0) + n
    return Result(
        scenario=chosen.scenario,
        requests_per_second=chosen.requests_per_second,
        p50_ms=chosen.p50_ms,
        p99_ms=chosen.p99_ms,
        requests=chosen.requests,
        statuses=statuses,
        socket_errors=errors,
        raw=chosen.raw,
        server_cpu_us=chosen.server_cpu_us,
        machine_cpu_us=chosen.machine_cpu_us,
    )


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    if shutil.which("wrk") is None:
        print(
            "wrk is not installed. Install it (Debian/Ubuntu: `apt-get install -y wrk`) and run again.", file=sys.stderr
        )
        return 2

    # Ctrl-C raises KeyboardInterrupt; make SIGTERM do the same, so `finally` always cleans up.
    def on_sigterm(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)

    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")  # plain HTTP on 127.0.0.1, as make run
    # One key makes every request here: lift its budgets so that the run measures the service,
    # while still paying the rate limiter's cost on every request.
    os.environ.setdefault("API_THROTTLE_READ", "100000000/m")
    os.environ.setdefault("API_THROTTLE_WRITE", "100000000/m")
    # ... and its turn calls at once (TURN_CONCURRENCY, 4 per key in production): wrk's connections
    # all hold the one key, so the cap would answer 429 to most of them (still counted each call).
    os.environ.setdefault("TURN_CONCURRENCY", "1000")
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    embedded_db = not os.environ.get("DATABASE_URL")
    workers = os.environ.get("WEB_CONCURRENCY", "2")  # what `make run` uses

    out_dir = RESULTS / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    processes = Processes()
    handles: list[object] = []
    script_dir = Path(tempfile.mkdtemp(prefix="pinned-fetch-"))
    try:
        handles = start_services("bench")
        if embedded_db:
            # start_services points at the `registry` database `make run` uses: take our own.
            url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{BENCH_DATABASE}").geturl()
            os.environ["DATABASE_URL"] = url
            recreate_database(url)
        print("migrating ...", flush=True)
        manage("migrate", "--no-input", "-v", "0")
        stamp = time.strftime("%Y%m%d%H%M%S")
        ops_key = manage("create_api_key", "--name", f"bench-ops-{stamp}", "--role", "ops").strip().splitlines()[-1]
        agent_name = f"bench-agent-{stamp}"
        agent_key = manage("create_api_key", "--name", agent_name, "--role", "agent").strip().splitlines()[-1]

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        web_log = out_dir / "web.log"
        web = processes.start(web_command(str(port), access_log=False), web_log)
        worker = processes.start(
            [str(BIN / "celery"), "-A", "config", "worker", "-l", "warning", "-c", "2"],
            out_dir / "worker.log",
        )
        wait_until_ready(base, web, web_log)

        bundle = f"bench-{stamp}"
        print(f"creating bundle {bundle!r} and {ns.sessions} sessions ...", flush=True)
        ids, content_hash, body_size = create_data(
            base, ops_key=ops_key, agent_key=agent_key, bundle=bundle, sessions=ns.sessions
        )
        render_ids = create_render_data(
            base, ops_key=ops_key, agent_key=agent_key, bundle=f"{bundle}-render", sessions=ns.sessions
        )

        # The ceiling: the same server and worker count serving only the bytes a fetch returns.
        _, _, fetched = call(base, "GET", f"/api/v1/sessions/{ids[0]}/bundle/", agent_key)
        body_file = out_dir / "bundle.json"
        body_file.write_bytes(fetched)
        bare_port = free_port()
        bare_base = f"http://127.0.0.1:{bare_port}"
        bare_log = out_dir / "bare.log"
        os.environ["BARE_BODY_FILE"] = str(body_file)
        bare = processes.start(
            [
                str(BIN / "python"),
                "-m",
                "edge.serve",
                "--port",
                str(bare_port),
                "--workers",
                workers,
                "--app",
                "bench.bare_app:application",
            ],
            bare_log,
        )
        wait_until_ready(bare_base, bare, bare_log, path="/")

        # Session ends need active sessions: enough for the fastest plausible rate, per round.
        to_end = seed_sessions_to_end(bundle=bundle, agent_key_name=agent_name, count=4000 * ns.duration * ns.rounds)

        auth = {"Authorization": f"Bearer {agent_key}"}
        json_auth = {**auth, "Content-Type": "application/json"}
        fetch_paths = [f"/api/v1/sessions/{session_id}/bundle/" for session_id in ids]
        end_paths = [f"/api/v1/sessions/{session_id}/end/" for session_id in to_end]
        bare_scenario = Scenario("bare app (the ceiling)", "GET", ["/"], 200)
        scenarios = {
            "fetch": Scenario("GET bundle", "GET", fetch_paths, 200, auth),
            "revalidate": Scenario(
                "GET bundle, If-None-Match", "GET", fetch_paths, 304, {**auth, "If-None-Match": f'"{content_hash}"'}
            ),
            "heartbeat": Scenario(
                "POST heartbeat", "POST", [f"/api/v1/sessions/{i}/heartbeat/" for i in ids], 200, auth
            ),
            "start": Scenario(
                "POST session start", "POST", ["/api/v1/sessions/"], 201, json_auth, json.dumps({"bundle": bundle})
            ),
            "end": Scenario("POST session end", "POST", end_paths, 200, auth),
            "render": Scenario(
                "POST render (variables, 1 pack)",
                "POST",
                [f"/api/v1/sessions/{session_id}/render/" for session_id in render_ids],
                200,
                json_auth,
                json.dumps({"variables": {"ticket": "T-1"}}),
            ),
        }
        turn_ids, prefix_sha256, history = create_turn_data(
            base, ops_key=ops_key, agent_key=agent_key, bundle=f"{bundle}-turn", sessions=ns.sessions
        )
        invoked = skill_cards(100)[0]["name"]
        if prefix_sha256 is not None:
            turn_body = {"messages": history, "format": "anthropic", "k": 5, "prefix_sha256": prefix_sha256}
            scenarios["turn"] = Scenario(
                "POST turn (1 call per turn)",
                "POST",
                [f"/api/v1/sessions/{session_id}/turn/" for session_id in turn_ids],
                200,
                json_auth,
                json.dumps({**turn_body, "invoked": [invoked]}),
            )
        else:
            print("this build has no turn endpoint: the one-call turn scenario is skipped", flush=True)
        # Today's sequence per turn, for the same sessions and history: render, route, report the
        # previous turn, compact, and the pinned fetch (revalidated: the client holds the bundle).
        sequence: list[tuple[str, str, str | None]] = []
        for session_id in turn_ids:
            path = f"/api/v1/sessions/{session_id}/"
            sequence += [
                ("POST", path + "render/", "{}"),
                ("POST", path + "route/", json.dumps({"messages": history, "k": 5})),
                ("POST", path + "turns/", json.dumps({"turn": 1, "invoked": [invoked]})),
                ("POST", path + "compact/", json.dumps({"messages": history})),
                ("GET", path + "bundle/", None),
            ]
        turn_hash = json.loads(call(base, "GET", f"/api/v1/sessions/{turn_ids[0]}/", agent_key)[2])["content_hash"]
        scenarios["sequence"] = Scenario(
            "render+route+turns+compact+fetch",
            "POST",
            [p for _, p, _ in sequence],
            200,
            {**json_auth, "If-None-Match": f'"{turn_hash}"'},
            methods=[m for m, _, _ in sequence],
            bodies=[b for _, _, b in sequence],
            also_ok=(304,),
            per_turn=5,
        )
        if ns.only:
            scenarios = {k: v for k, v in scenarios.items() if k in ns.only.split(",")}
        wrk_args = {"threads": ns.threads, "connections": ns.connections, "out_dir": out_dir, "script_dir": script_dir}
        if ns.warmup:
            print(f"warming up for {ns.warmup}s ...", flush=True)
            run_wrk(bare_scenario, base=bare_base, duration=ns.warmup, slug="warmup-bare", **wrk_args)
            if "fetch" in scenarios:
                run_wrk(scenarios["fetch"], base=base, duration=ns.warmup, slug="warmup", **wrk_args)
        rounds: dict[str, list[Result]] = {"bare": [], **{slug: [] for slug in scenarios}}
        for n in range(ns.rounds):
            # Interleaved: the ceiling is measured in each round, next to what it is compared with.
            print(f"round {n + 1}/{ns.rounds}: bare app for {ns.duration}s ...", flush=True)
            rounds["bare"].append(
                measured(
                    partial(run_wrk, bare_scenario, base=bare_base, duration=ns.duration, slug=f"bare-{n}", **wrk_args),
                    bare.pid,
                )
            )
            for slug, scenario in scenarios.items():
                if slug == "end":  # each round ends its own sessions
                    share = len(end_paths) // ns.rounds
                    scenario = Scenario(**{**scenario.__dict__, "paths": end_paths[n * share : (n + 1) * share]})
                print(f"round {n + 1}/{ns.rounds}: {scenario.title} for {ns.duration}s ...", flush=True)
                rounds[slug].append(
                    measured(
                        partial(run_wrk, scenario, base=base, duration=ns.duration, slug=f"{slug}-{n}", **wrk_args),
                        web.pid,
                    )
                )

        results = {slug: median_result(rs) for slug, rs in rounds.items()}
        rss = {"web": process_rss_mb(web.pid), "bare": process_rss_mb(bare.pid), "celery": process_rss_mb(worker.pid)}
        print(f"holding {ns.slow_clients} slow-body connections while timing /healthz ...", flush=True)
        slow = slow_clients.measure(base, clients=ns.slow_clients, seconds=2 if ns.short else 5)
        report(ns, results, rss=rss, slow=slow, workers=workers, body_size=body_size, out_dir=out_dir)
        return 0 if all(r.ok for r in results.values()) else 1
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as error:
        print(f"{error.cmd} failed:\n{error.stdout}{error.stderr}", file=sys.stderr)
        return 1
    finally:
        # Ignore a second Ctrl-C while stopping, so that nothing is left running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        stop_services(handles)
        shutil.rmtree(script_dir, ignore_errors=True)


def report(
    ns: argparse.Namespace,
    results: dict[str, Result],
    *,
    rss: dict[str, dict[str, list[float]]],
    slow: dict[str, dict[str, float]],
    workers: str,
    body_size: int,
    out_dir: Path,
) -> None:
    bare = results["bare"].requests_per_second
    print(
        f"\nwrk: {ns.threads} threads, {ns.connections} connections, {ns.duration}s per scenario, {ns.rounds} round(s)"
        f" (medians), timeout {WRK_TIMEOUT}"
        f"\nserver: python -m edge.serve (granian, config.asgi), {workers} workers, no access log; the bare app on"
        f" the same server and worker count; {os.cpu_count()} CPUs shared with wrk, PostgreSQL and Redis;"
        f" load average at the end {os.getloadavg()[0]:.1f}"
        f"\ndata: {ns.sessions} sessions, pinned-bundle body {body_size} bytes\n"
    )
    header = f"{'scenario':<32} {'expect':>6} {'req/s':>9} {'x bare':>7} {'p50 ms':>8} {'p99 ms':>8} {'p99/p50':>7}"
    print(header + f" {'requests':>9} {'web CPU us/req':>14}  errors")
    for r in results.values():
        problems = [f"{n} x {code}" for code, n in sorted(r.unexpected.items())]
        problems += [f"{n} socket {kind}" for kind, n in r.socket_errors.items() if n]
        print(
            f"{r.scenario.title:<32} {r.scenario.expected:>6} {r.requests_per_second:>9.1f}"
            f" {r.requests_per_second / bare:>7.3f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f}"
            f" {r.p99_ms / max(r.p50_ms, 0.001):>7.1f} {r.requests:>9} {r.server_cpu_us:>14.0f}"
            f"  {', '.join(problems) or 'none'}"
        )
    turn_rows = {slug: results[slug] for slug in ("turn", "sequence") if slug in results}
    if turn_rows:
        print(
            "\nper agent turn (the same 100-skill version, 20-message history with 8 tool results, one pack):"
            "\n  turn: one POST /turn/ (format anthropic, prefix_sha256 held); sequence: render, route, turns,"
            "\n  compact and the pinned fetch (If-None-Match), five requests in rotation over the same sessions"
        )
        print(f"  {'scenario':<34} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99/p50':>7} {'web CPU us/turn':>15}")
        for r in turn_rows.values():
            n = r.scenario.per_turn
            # For the sequence, wrk's latencies are per request: a turn waits for five in a row,
            # so its latency is about five times theirs (printed as such, marked "5 x").
            scale = f"{n} x " if n > 1 else ""
            print(
                f"  {r.scenario.title:<34} {r.requests_per_second / n:>9.1f} {scale + f'{r.p50_ms:.2f}':>8}"
                f" {scale + f'{r.p99_ms:.2f}':>8} {r.p99_ms / max(r.p50_ms, 0.001):>7.1f} {r.server_cpu_us * n:>15.0f}"
            )
        if len(turn_rows) == 2:
            one, four = turn_rows["turn"], turn_rows["sequence"]
            n = four.scenario.per_turn
            faster = one.requests_per_second / (four.requests_per_second / n)
            cheaper = four.server_cpu_us * n / max(one.server_cpu_us, 1)
            print(f"  one call per turn: {faster:.1f}x the turns/s of the sequence, {cheaper:.1f}x less web CPU a turn")
    web_workers = rss["web"]["children"]
    print(
        f"\nRSS (MB): web workers {web_workers} (server process {rss['web']['main']}),"
        f" bare-app workers {rss['bare']['children']},"
        f" Celery {rss['celery']['main']} + pool {rss['celery']['children']}"
    )
    for phase, f in slow.items():
        print(
            f"/healthz {phase} {ns.slow_clients} slow-body clients: p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms,"
            f" max {f['max_ms']:.1f} ms ({f['requests']:.0f} requests)"
        )
    line = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(),
        "short": ns.short,
        "machine": {"cpus": os.cpu_count(), "load_average_end": round(os.getloadavg()[0], 2)},
        "server": {"command": "python -m edge.serve", "workers": int(workers)},
        "wrk": {"threads": ns.threads, "connections": ns.connections, "duration_s": ns.duration, "rounds": ns.rounds},
        "body_bytes": body_size,
        "scenarios": {
            slug: {
                "rps": round(r.requests_per_second, 1),
                "x_bare": round(r.requests_per_second / bare, 4),
                "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms,
                "server_cpu_us_per_request": round(r.server_cpu_us, 1),
                "requests_per_turn": r.scenario.per_turn,
                "unexpected": {str(k): v for k, v in r.unexpected.items()},
            }
            for slug, r in results.items()
        },
        "rss_mb": rss,
        "slow_clients": {"count": ns.slow_clients, **slow},
    }
    with RESULTS_LOG.open("a") as out:
        out.write(json.dumps(line) + "\n")
    print(f"\nraw wrk output and server logs: {out_dir.relative_to(ROOT)}/; this run appended to {RESULTS_LOG.name}")


if __name__ == "__main__":
    sys.exit(main())
