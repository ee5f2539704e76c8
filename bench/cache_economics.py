"""What a byte-stable prefix saves: a reference day of agent turns, priced as a provider bills them.

    make bench-cache                      # 500 sessions x 20 turns (a few minutes)
    make bench-cache-short                # 20 sessions x 10 turns (a smoke run)
    .venv/bin/python bench/cache_economics.py --provider openai --sessions 100

In process (as bench/render.py), in the database DATABASE_URL names (without one, the embedded
PostgreSQL and Redis of devtools.stack and a database of its own, recreated): a bundle with
100 skills (eval/routing/skills.json, 38 of them renamed copies), six tools, a long system
prompt and one knowledge pack (two domains, each with a DUTY.md), then a day from 06:00 to
06:00 UTC:

- `--sessions` sessions start at random times; each takes `--turns` turns 45 to 90 s apart
  (inside a provider's 5-minute cache lifetime); a turn adds the model's answer and the next
  user message or a tool result (about 1.5 KB of log lines, on 8 of 20 turns), and the model
  calls the top routed skill on those turns (reported as `invoked` next turn);
- every 5 minutes a knowledge edit: a runbook rewritten or a new file, in existing domains;
- at 12:00 version 2 is published and `production` moves to it;
- at 15:00 sre/DUTY.md is edited (the one edit that changes the prefix of every session);
- midnight passes.

Each turn is one call to the turn endpoint's service (`format: anthropic`) when this build has
it (its render reads the real clock, so the simulated midnight reaches only the naive
registry's system prompt; the turn call's date is in the tail, after the breakpoint); otherwise
(until it lands) the same inputs from render, route, turns and compact, with the
Anthropic request assembled here the way the turn call does (the stable prefix first, one
breakpoint at its end, then the compacted messages, the routed cards and the tail). The
reference version's compaction policy is `keep_tool_results: 5` with `elide_step: 4`
(--elide-step; 0 is the default policy, one result elided per tool call). From the same
answers, four provider requests are built per turn:

  ours     the turn call's `request`: a cache breakpoint at the end of the stable prefix and
           one at the end of the conversation, before the per-turn text
  one-bp   the same request with the first breakpoint only (the turn call before the second)
  render   the same request without its breakpoints (an agent that calls render and lays out
           the request itself, placing no cache marker)
  naive    what a registry without a stable prefix serves: the date and the knowledge pack's
           file list at the top of the system prompt, the routed skills as tools (before the
           system prompt, in the provider's order), compaction as a window of the last 12
           messages (so the start is rewritten every turn once it fills), and hot reload: a
           session follows `production` to version 2 mid-conversation

The request's bytes are taken in the order the provider reads them (tools, system, messages;
a text content as the one text block it stands for; without the cache markers, which are not
part of what is cached). For each turn the longest prefix shared with the same session's
previous request is what the provider can serve from its cache, and, in the "organisation"
columns, with any of the organisation's last 16 requests in the cache's lifetime. Tokens are
bytes / 4. Two ways of billing are printed:

  every prefix   the provider caches whatever prefix it saw (OpenAI's automatic caching;
                 Anthropic with a breakpoint on the newest message too): read = the shared
                 prefix (when at least --floor tokens), write = the rest
  as sent        only up to the breakpoints the request carries (Anthropic as the request is
                 sent): the prefix up to each breakpoint is cached; read = the longest prefix an
                 earlier request cached at one of its breakpoints that this request still starts
                 with (within 20 blocks before one of its breakpoints: Anthropic's lookback),
                 write = the rest up to the last breakpoint, the rest at the base price; no
                 breakpoint (or none reaching --floor), no cache

Prices are relative to the base input price: --provider anthropic (read 0.1x, write 1.25x,
floor 1,024 tokens: Claude Sonnet/Opus; Haiku's floor is 2,048), openai (read 0.1x as on the
GPT-5 family, write 1x, floor 1,024), or --read / --write / --floor. Output tokens are not
counted: they are the same in every arrangement.
"""

import argparse
import bisect
import heapq
import json
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PRESETS = {
    # read ratio, write ratio, floor in tokens
    "anthropic": (0.10, 1.25, 1024),
    "openai": (0.10, 1.00, 1024),
}
DAY_START = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
LABEL_MOVE = DAY_START.replace(hour=12)
DUTY_EDIT = DAY_START.replace(hour=15)
EDIT_EVERY = timedelta(minutes=5)
NAIVE_WINDOW = 12  # messages the naive compaction keeps
TOOL_TURNS = 8  # of 20 turns, the ones that end in a tool call (scaled for other --turns)
BYTES_PER_TOKEN = 4
CACHE_LIFETIME = timedelta(minutes=5)  # Anthropic's default cache lifetime, renewed by each read
RECENT_REQUESTS = 16  # the organisation's latest requests a new one is compared with
LOOKBACK_BLOCKS = 20  # Anthropic looks for an earlier cached prefix this many blocks before a breakpoint
# What an agent with a tool call on 8 turns in 20 would set (docs/performance.md): elided five at
# a time, the conversation behind the second breakpoint is rewritten once every five results.
REFERENCE_ELIDE_STEP = 4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--short", action="store_true", help="20 sessions x 10 turns")
    parser.add_argument("--provider", choices=sorted(PRESETS), default="anthropic")
    parser.add_argument("--read", type=float, help="price of a cached token, x the base input price")
    parser.add_argument("--write", type=float, help="price of a token written to the cache")
    parser.add_argument("--floor", type=int, help="the model's minimum cacheable prefix, in tokens")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument(
        "--elide-step",
        type=int,
        default=REFERENCE_ELIDE_STEP,
        help=f"the reference version's compaction elide_step (default {REFERENCE_ELIDE_STEP}; 0: one at a time)",
    )
    ns = parser.parse_args(argv)
    if ns.short:
        ns.sessions, ns.turns = 20, 10
    read, write, floor = PRESETS[ns.provider]
    ns.read = read if ns.read is None else ns.read
    ns.write = write if ns.write is None else ns.write
    ns.floor = floor if ns.floor is None else ns.floor
    return ns


# --- the database ----------------------------------------------------------------------------


def prepare_database() -> list[object]:
    """Point Django at a migrated database; returns handles of what was started."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DJANGO_SECURE", "0")
    handles: list[object] = []
    if not os.environ.get("DATABASE_URL"):
        from pinned_fetch import recreate_database

        from devtools.stack import start_services

        handles = start_services("bench")
        url = urlsplit(os.environ["DATABASE_URL"])._replace(path="/registry_cache_bench").geturl()
        os.environ["DATABASE_URL"] = url
        recreate_database(url)
    from pinned_fetch import manage

    manage("migrate", "--no-input", "-v", "0")
    import django

    django.setup()
    return handles


# --- the content -----------------------------------------------------------------------------


def skills_100() -> list[dict[str, Any]]:
    base = json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())
    skills = list(base)
    routed = [s for s in base if s["level"] == "L2"]
    i = 0
    while len(skills) < 100:
        card = dict(routed[i % len(routed)])
        card["name"] = f"{card['name']}_{i // len(routed) + 2}"
        skills.append(card)
        i += 1
    return skills


def content(pack: str, *, version: int, elide_step: int) -> dict[str, Any]:
    from pinned_fetch import content_document

    doc = content_document()
    if elide_step:  # the default policy otherwise (keep_tool_results 5, elided one at a time)
        doc["compaction"] = {"keep_tool_results": 5, "elide_step": elide_step}
    doc["system_prompt"] = (f"Release {version}.\n\n" if version > 1 else "") + doc["system_prompt"]
    doc["skills"] = skills_100()
    doc["knowledge"] = [pack]
    return doc


USER_LINES = [
    turn["user"]
    for conversation in json.loads((ROOT / "eval" / "routing" / "conversations.json").read_text())
    for turn in conversation["turns"]
]


def tool_output(rng: random.Random, n: int) -> str:
    lines = [
        f"2026-12-01T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z order A{rng.randrange(10**5, 10**6)}"
        f" status={rng.choice(['shipped', 'delivered', 'held', 'refunded'])}"
        f" carrier={rng.choice(['dhl', 'ups', 'gls'])}"
        f" amount={rng.randrange(5, 900)}.{rng.randrange(100):02d} EUR note={rng.choice(USER_LINES)[:40]!r}"
        for _ in range(12)
    ]
    return f"lookup {n}:\n" + "\n".join(lines)


# --- requests in the provider's reading order --------------------------------------------------


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def provider_bytes(request: dict[str, Any]) -> tuple[bytes, int]:
    """An Anthropic Messages request as the provider reads it for caching (tools, then system,
    then messages), and the offset just after its last cache breakpoint (0: none)."""
    layout = provider_layout(request)
    return layout.data, max(layout.breakpoints, default=0)


@dataclass
class Layout:
    """A request's bytes in the provider's reading order, without its cache markers (a marker
    is not part of what is cached: moving it leaves the cached bytes alone), a text content as
    the one text block it stands for; the offsets after each marked block, after every block
    (for the lookback), and where the newest message starts."""

    data: bytes
    breakpoints: list[int]
    block_ends: list[int]
    newest: int


def provider_layout(request: dict[str, Any]) -> Layout:
    parts: list[bytes] = []
    size = 0
    breakpoints: list[int] = []
    block_ends: list[int] = []
    newest = 0

    def add(data: bytes, *, block: bool = False, marked: bool = False) -> None:
        nonlocal size
        parts.append(data)
        size += len(data)
        if block:
            block_ends.append(size)
        if marked:
            breakpoints.append(size)

    system = request.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for item in [*(request.get("tools") or []), *system]:
        add(canonical(without_breakpoints(item)), block=True, marked="cache_control" in item)
    for message in request.get("messages") or []:
        newest = size
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        add(b'{"role":' + canonical(message["role"]) + b',"content":[')
        for i, block in enumerate(blocks):
            data = (b"," if i else b"") + canonical(without_breakpoints(block))
            add(data, block=True, marked="cache_control" in block)
        add(b"]}")
    return Layout(b"".join(parts), breakpoints, block_ends, newest)


def shared_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix (a binary search of C-level comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    va, vb = memoryview(a), memoryview(b)
    if va[:hi] == vb[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if va[:mid] == vb[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class Bill:
    """Token counts and cost of one arrangement over the day, under one way of billing."""

    tokens: float = 0.0
    read: float = 0.0
    written: float = 0.0
    cost: float = 0.0

    def add(self, *, tokens: float, read: float, written: float, ratios: tuple[float, float]) -> None:
        self.tokens += tokens
        self.read += read
        self.written += written
        self.cost += ratios[0] * read + ratios[1] * written + (tokens - read - written)


@dataclass
class Arrangement:
    """One way of building the requests, billed four ways: by what the provider caches (every
    prefix, or only up to the breakpoints) and by whose requests it can read from (the same
    session's previous one, or any request of the organisation within the cache's lifetime)."""

    name: str
    bills: dict[tuple[str, str], Bill] = field(default_factory=dict)
    misses_in_prefix: int = 0  # turns (after the first) whose shared prefix ended inside tools + system
    # Input tokens not read from the session's cache, by why: the session's first turn, a changed
    # stable part, an earlier message rewritten (compaction), or what is new since the last turn.
    uncached: dict[str, float] = field(default_factory=dict)
    previous: dict[str, Layout] = field(default_factory=dict)
    recent: list[tuple[datetime, Layout]] = field(default_factory=list)  # the organisation's last requests

    def bill(self, scope: str, billing: str) -> Bill:
        return self.bills.setdefault((scope, billing), Bill())

    def price(
        self, session: str, request: dict[str, Any], stable_end: int, now: datetime, ns: argparse.Namespace
    ) -> None:
        layout = provider_layout(request)
        data = layout.data
        before = self.previous.get(session)
        self.previous[session] = layout
        own = shared_prefix(before.data, data) if before is not None else 0
        if before is None:
            why = "first turn"
        elif own < stable_end:
            why = "stable part changed"
            self.misses_in_prefix += 1
        elif own < before.newest:
            why = "history rewritten"
        else:
            why = "new since the last turn"
        self.uncached[why] = self.uncached.get(why, 0.0) + (len(data) - own) / BYTES_PER_TOKEN
        # A provider's cache belongs to the organisation: another session's request on the same
        # prefix within the cache's lifetime (5 minutes, renewed by each read) serves it too.
        self.recent = [(at, old) for at, old in self.recent if now - at <= CACHE_LIFETIME]
        others = [(old, shared_prefix(old.data, data)) for _, old in self.recent]
        anyone = max([own, *(shared for _, shared in others)])
        self.recent = [*self.recent[-(RECENT_REQUESTS - 1) :], (now, layout)]
        seen = [(before, own)] if before is not None else []
        for scope, shared, cached in (("session", own, seen), ("organisation", anyone, [*seen, *others])):
            self._add(scope, layout, shared, cached, ns)

    def _add(
        self, scope: str, layout: Layout, shared: int, cached: list[tuple[Layout, int]], ns: argparse.Namespace
    ) -> None:
        tokens, shared_tokens = len(layout.data) / BYTES_PER_TOKEN, shared / BYTES_PER_TOKEN
        ratios = (ns.read, ns.write)
        read = shared_tokens if shared_tokens >= ns.floor else 0.0
        self.bill(scope, "every_prefix").add(tokens=tokens, read=read, written=tokens - read, ratios=ratios)
        self.bill(scope, "as_sent").add(tokens=tokens, **as_sent(layout, cached, ns), ratios=ratios)


def as_sent(layout: Layout, cached: list[tuple[Layout, int]], ns: argparse.Namespace) -> dict[str, float]:
    """Read and written tokens as Anthropic bills a request by its breakpoints: the prefix up to
    each breakpoint (of at least --floor tokens) is cached; the request reads the longest prefix
    an earlier request cached (one of its breakpoints, still a prefix of this request, within
    LOOKBACK_BLOCKS blocks before one of this request's breakpoints) and writes the rest up to its
    last breakpoint; what follows is billed at the base price. `cached`: earlier requests still
    in the cache, each with the bytes it shares with this one."""
    floor = ns.floor * BYTES_PER_TOKEN
    marks = [b for b in layout.breakpoints if b >= floor]
    if not marks:  # no breakpoint, or none reaching the model's minimum: nothing cached
        return {"read": 0.0, "written": 0.0}
    hit = 0
    for old, shared in cached:
        for q in old.breakpoints:
            if q < floor or q > shared or q <= hit:
                continue
            at = bisect.bisect_left(layout.block_ends, q)
            if any(b >= q and bisect.bisect_left(layout.block_ends, b) - at <= LOOKBACK_BLOCKS for b in marks):
                hit = q
    last = max(marks)
    return {"read": hit / BYTES_PER_TOKEN, "written": (last - hit) / BYTES_PER_TOKEN}


# --- one turn, and the three requests built from it ---------------------------------------------


@dataclass
class TurnAnswer:
    """What the turn call answers, in the pieces the baselines need."""

    prefix_system: str
    prefix_tools: list[dict[str, Any]]
    tail: str
    routed: list[str]
    request: dict[str, Any]  # with `format` the conversation is in it only (docs/api.md)
    turn: int


def find_turn_service() -> Callable[..., dict[str, Any]] | None:
    """The turn endpoint's service (`session_turn`), when this build has it."""
    import importlib

    for name in ("turns.compose", "api.turn_call", "sessions_app.turn_call"):  # where it lives; where it was first
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        service = getattr(module, "session_turn", None)
        if service is not None:
            return service
    return None


def without_breakpoints(value: Any) -> Any:
    """`value` with every `cache_control` marker removed."""
    if isinstance(value, dict):
        return {k: without_breakpoints(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_breakpoints(v) for v in value]
    return value


def first_breakpoint_only(request: dict[str, Any]) -> dict[str, Any]:
    """The request without the conversation's breakpoint: the one-breakpoint request the turn
    call sent before the second (the `one-bp` row)."""
    return {**request, "messages": without_breakpoints(request["messages"])}


def card_text(card: dict[str, Any]) -> str:
    return f"## {card['name']}\n{card['summary']}\n{card['description']}"


def neutral_to_anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stand-in's conversion of the neutral (OpenAI chat) shape to Anthropic's."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            out.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for call in m["tool_calls"]:
                arguments = json.loads(call["function"]["arguments"])
                blocks.append(
                    {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": arguments}
                )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m["role"], "content": [{"type": "text", "text": m["content"]}]})
    return out


class Replayer:
    def __init__(self, ns: argparse.Namespace) -> None:
        from access.actors import SYSTEM
        from knowledge import services as knowledge
        from registry.services import bundle_create, label_move, version_publish

        self.ns = ns
        self.actor = SYSTEM
        self.turn_service = find_turn_service()
        tag = time.strftime("%Y%m%d%H%M%S")
        self.pack = knowledge.pack_create(name=f"economics-kb-{tag}", actor=SYSTEM)
        self.files: dict[str, str] = {
            "sre/DUTY.md": "# SRE on duty\n\nStart with knowledge/sre/runbooks/; page the lead for sev1.\n" * 6,
            "sre/runbooks/disk-full.md": "Check df -h, rotate logs, grow the volume.\n" * 30,
            "sre/runbooks/db-failover.md": "Promote the replica, repoint the service.\n" * 30,
            "billing/DUTY.md": "Refunds over 100 EUR need a second pair of eyes.\n" * 4,
            "billing/refunds.md": "How refunds flow through the ledger.\n" * 30,
        }
        for path, text in self.files.items():
            knowledge.file_put(pack=self.pack, path=path, content=text, actor=SYSTEM)
        self.bundle = bundle_create(name=f"economics-{tag}", actor=SYSTEM)
        self.v1 = version_publish(
            bundle=self.bundle,
            content=content(self.pack.name, version=1, elide_step=ns.elide_step),
            message="v1",
            actor=SYSTEM,
        ).version
        label_move(bundle=self.bundle, name="production", version=self.v1, actor=SYSTEM, reason="bench")
        self.current = self.v1  # what production targets now (what a hot-reloading registry serves)
        self.cards = {card["name"]: card for card in skills_100()}
        self.arrangements = {name: Arrangement(name) for name in ("ours", "one-bp", "render", "naive")}
        self.edits = 0

    # events ---------------------------------------------------------------------------------

    def knowledge_edit(self, now: datetime) -> None:
        from knowledge import services as knowledge

        self.edits += 1
        if self.edits % 2:
            path, text = "sre/runbooks/disk-full.md", f"Revision {self.edits}: check df -h first.\n" * 30
        else:
            domain = "sre" if self.edits % 4 else "billing"
            path, text = f"{domain}/notes/note-{self.edits:03d}.md", f"Note {self.edits} written {now:%H:%M}.\n" * 20
        self.files[path] = text
        knowledge.file_put(pack=self.pack, path=path, content=text, actor=self.actor)

    def duty_edit(self) -> None:
        from knowledge import services as knowledge

        text = self.files["sre/DUTY.md"] + "Since 15:00: sev2 pages the secondary too.\n"
        self.files["sre/DUTY.md"] = text
        knowledge.file_put(pack=self.pack, path="sre/DUTY.md", content=text, actor=self.actor)

    def label_move(self) -> None:
        from registry.services import label_move, version_publish

        v2 = version_publish(
            bundle=self.bundle,
            content=content(self.pack.name, version=2, elide_step=self.ns.elide_step),
            message="v2",
            actor=self.actor,
        ).version
        label_move(bundle=self.bundle, name="production", version=v2, actor=self.actor, reason="noon release")
        self.current = v2

    # a turn -----------------------------------------------------------------------------------

    def start(self) -> Any:
        from sessions_app.services import session_start

        session, _ = session_start(bundle=self.bundle, actor=self.actor)
        return session

    def call_turn(
        self, session: Any, messages: list[dict[str, Any]], invoked: list[str] | None, now: datetime, last_turn: int
    ) -> TurnAnswer:
        if self.turn_service is not None:
            # The whole request every turn (no prefix_sha256): what the provider receives.
            body: dict[str, Any] = {"messages": messages, "format": "anthropic", "k": 5}
            if invoked is not None:
                body["invoked"] = invoked
            answer = self.turn_service(session_id=session.pk, actor=self.actor, body=body)
            return TurnAnswer(
                prefix_system=answer["prefix"]["system"],
                prefix_tools=answer["prefix"]["tools"],
                tail=answer["tail"],
                routed=[r["name"] for r in answer["skills"]["routed"]],
                request=answer["request"],
                turn=answer["turn"],
            )
        return self.standin_turn(session, messages, invoked, now, last_turn)

    def standin_turn(
        self, session: Any, messages: list[dict[str, Any]], invoked: list[str] | None, now: datetime, last_turn: int
    ) -> TurnAnswer:
        """render + route + turns + compact, and the request assembled as the turn call does."""
        from core.compaction import compact, policy_from_content
        from knowledge.render import render_session
        from sessions_app.services import session_use
        from skills.selectors import session_content
        from skills.services import skill_route, skill_turn_report

        session = session_use(session_id=session.pk, actor=self.actor)
        if invoked is not None and last_turn:
            skill_turn_report(session=session, turn=last_turn, invoked=invoked)
        routed = skill_route(session=session, messages=messages, k=5)
        rendered = render_session(session=session, actor=self.actor, now=now)
        compacted = compact(messages, policy_from_content(session_content(session))).messages
        names = [r["name"] for r in routed["routed"]]
        cards = "\n\n".join(card_text(self.cards[n]) for n in names if n in self.cards)
        system = [{"type": "text", "text": rendered.prefix.system, "cache_control": {"type": "ephemeral"}}]
        volatile = [{"type": "text", "text": f"Skills for this turn:\n\n{cards}"}] if cards else []
        volatile.append({"type": "text", "text": rendered.tail})
        request = {
            "model": "support-large-2025-06",
            "max_tokens": 1024,
            "tools": rendered.prefix.tools,
            "system": system,
            "messages": [*neutral_to_anthropic(compacted), {"role": "user", "content": volatile}],
        }
        return TurnAnswer(
            prefix_system=rendered.prefix.system,
            prefix_tools=rendered.prefix.tools,
            tail=rendered.tail,
            routed=names,
            request=request,
            turn=routed["turn"],
        )

    def render_request(self, answer: TurnAnswer) -> dict[str, Any]:
        """The same request without its breakpoint: what an agent that calls render and lays
        out the request itself sends when it places no cache marker."""
        return without_breakpoints(answer.request)

    def naive_request(
        self, session: Any, answer: TurnAnswer, raw: list[dict[str, Any]], now: datetime
    ) -> dict[str, Any]:
        from core.compaction import DEFAULT_POLICY, Policy, compact
        from knowledge.render import version_prefix

        system, tools = answer.prefix_system, answer.prefix_tools
        if self.current.pk != session.version_id:  # hot reload: what production targets now
            prefix, _ = version_prefix(
                version_id=self.current.pk, content_hash=self.current.content_hash, session_variables={}
            )
            system, tools = prefix.system, prefix.tools
        files = "\n".join(f"- knowledge/{self.pack.name}/{path}" for path in sorted(self.files))
        header = f"Today is {now:%A %d %B %Y}.\n\nKnowledge files:\n{files}\n\n"
        skill_tools = [
            {"name": n, "description": card_text(self.cards[n]), "input_schema": {"type": "object"}}
            for n in answer.routed
            if n in self.cards
        ]
        window = compact(raw, Policy(**DEFAULT_POLICY)).messages[-NAIVE_WINDOW:]
        while window and window[0]["role"] == "tool":  # a window never starts with an orphan result
            window = window[1:]
        messages = neutral_to_anthropic(window)
        return {
            "tools": [*tools, *skill_tools],
            "system": [{"type": "text", "text": header + system}],
            "messages": messages,
        }


def replay(ns: argparse.Namespace) -> tuple[Replayer, int, float]:
    rng = random.Random(ns.seed)
    replayer = Replayer(ns)
    events: list[tuple[datetime, int, str, Any]] = []
    seq = 0

    def push(at: datetime, kind: str, data: Any = None) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, data))
        seq += 1

    at = DAY_START + EDIT_EVERY
    while at < DAY_START + timedelta(days=1):
        push(at, "edit")
        at += EDIT_EVERY
    push(LABEL_MOVE, "label")
    push(DUTY_EDIT, "duty")
    span = timedelta(days=1) - timedelta(seconds=90 * ns.turns)
    tool_turns = max(1, round(ns.turns * TOOL_TURNS / 20))
    for n in range(ns.sessions):
        began = DAY_START + timedelta(seconds=rng.uniform(0, span.total_seconds()))
        calls = set(rng.sample(range(ns.turns - 1), min(tool_turns, ns.turns - 1)))
        push(began, "turn", {"n": n, "turn": 0, "tools": calls, "messages": [], "session": None, "invoked": None})
    turns = 0
    started = time.perf_counter()
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "edit":
            replayer.knowledge_edit(now)
        elif kind == "label":
            replayer.label_move()
        elif kind == "duty":
            replayer.duty_edit()
        else:
            turns += 1
            if data["session"] is None:
                data["session"] = replayer.start()
                data["last_turn"] = 0
                data["messages"] = [{"role": "user", "content": rng.choice(USER_LINES)}]
            session, messages = data["session"], data["messages"]
            answer = replayer.call_turn(session, messages, data["invoked"], now, data["last_turn"])
            data["last_turn"] = answer.turn
            key = str(session.pk)
            stable = len(
                provider_bytes(
                    {"tools": answer.prefix_tools, "system": [{"type": "text", "text": answer.prefix_system}]}
                )[0]
            )
            replayer.arrangements["ours"].price(key, answer.request, stable, now, ns)
            replayer.arrangements["one-bp"].price(key, first_breakpoint_only(answer.request), stable, now, ns)
            replayer.arrangements["render"].price(key, replayer.render_request(answer), stable, now, ns)
            naive = replayer.naive_request(session, answer, messages, now)
            replayer.arrangements["naive"].price(key, naive, stable, now, ns)
            # The model answers: a tool call (its result starts the next turn) or text and the user's next line.
            if data["turn"] in data["tools"]:
                call_id = f"call_{data['n']}_{data['turn']}"
                arguments = json.dumps({"order_id": f"A{rng.randrange(10**5, 10**6)}"})
                call = {"id": call_id, "type": "function", "function": {"name": "lookup_order", "arguments": arguments}}
                messages = [
                    *messages,
                    {"role": "assistant", "content": "Let me look that up.", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call_id, "content": tool_output(rng, data["turn"])},
                ]
                data["invoked"] = answer.routed[:1]
            else:
                messages = [
                    *messages,
                    {"role": "assistant", "content": f"Done: {rng.choice(USER_LINES)[:80]}"},
                    {"role": "user", "content": rng.choice(USER_LINES)},
                ]
                data["invoked"] = []
            data["messages"] = messages
            data["turn"] += 1
            if data["turn"] < ns.turns:
                push(now + timedelta(seconds=rng.uniform(45, 90)), "turn", data)
            else:
                from sessions_app.services import session_end

                session_end(session=session, actor=replayer.actor)
    return replayer, turns, time.perf_counter() - started


def report(ns: argparse.Namespace, replayer: Replayer, turns: int, seconds: float) -> dict[str, Any]:
    source = (
        f"the turn call ({replayer.turn_service.__module__}.{replayer.turn_service.__name__})"
        if replayer.turn_service
        else (
            "render + route + turns + compact, the request assembled as the turn call does"
            " (the turn call is not in this build)"
        )
    )
    print(
        f"\n{ns.sessions} sessions x {ns.turns} turns = {turns} turns over a day ({seconds:.0f} s in process);"
        f" {replayer.edits} knowledge edits, one DUTY.md edit at 15:00, production v1 -> v2 at 12:00, midnight."
        f"\neach turn: {source}."
        f"\nprices x base input: {ns.provider} read {ns.read}, write {ns.write}; floor {ns.floor} tokens;"
        f" tokens = bytes / {BYTES_PER_TOKEN}; cache lifetime {CACHE_LIFETIME.seconds // 60} min.\n"
    )
    naive = replayer.arrangements["naive"]
    figures: dict[str, Any] = {}
    for title, billing in (
        ("every prefix (the provider caches what it saw)", "every_prefix"),
        ("as sent (only up to the request's breakpoints)", "as_sent"),
    ):
        print(f"billing: {title}")
        print(f"{'':<10} {'':>10}   {'cache of the session':^30}   {'cache of the organisation':^30}")
        print(f"{'':<10} {'input Mtok':>10}", end="")
        print(f"   {'cached':>8} {'cost x base':>11} {'vs naive':>9}" * 2, end="")
        print(f"   {'prefix broken':>13}")
        for arrangement in replayer.arrangements.values():
            line = f"{arrangement.name:<10} {arrangement.bill('session', billing).tokens / 1e6:>10.2f}"
            for scope in ("session", "organisation"):
                bill, base = arrangement.bill(scope, billing), naive.bill(scope, billing)
                line += f"   {bill.read / bill.tokens:>8.1%} {bill.cost / bill.tokens:>11.3f}"
                line += f" {base.cost / bill.cost:>8.1f}x"
                figures.setdefault(f"{billing}/{scope}", {})[arrangement.name] = {
                    "input_tokens": round(bill.tokens),
                    "cached_share": round(bill.read / bill.tokens, 4),
                    "cost_per_token": round(bill.cost / bill.tokens, 4),
                    "x_lower_than_naive": round(base.cost / bill.cost, 2),
                }
            print(f"{line}   {arrangement.misses_in_prefix:>13}")
        print()
    print("input tokens not read from the session's cache, by why (share of all input tokens):")
    reasons = ("first turn", "stable part changed", "history rewritten", "new since the last turn")
    print(f"{'':<10} " + " ".join(f"{reason:>23}" for reason in reasons))
    for arrangement in replayer.arrangements.values():
        total = arrangement.bill("session", "every_prefix").tokens
        shares = [arrangement.uncached.get(reason, 0.0) / total for reason in reasons]
        print(f"{arrangement.name:<10} " + " ".join(f"{share:>23.1%}" for share in shares))
        figures.setdefault("uncached_by_why", {})[arrangement.name] = dict(
            zip(reasons, map(lambda x: round(x, 4), shares), strict=True)
        )
    print()
    print(
        "cached: share of input tokens read from the cache; cost x base: input cost over the day per input token,"
        "\nin units of the base price (1.0 = no cache); prefix broken: turns after a session's first whose shared"
        "\nprefix with its previous request ended inside the stable part (tools + system)."
    )
    return {
        "sessions": ns.sessions,
        "turns": turns,
        "provider": ns.provider,
        "read": ns.read,
        "write": ns.write,
        "floor": ns.floor,
        "source": source,
        "figures": figures,
    }


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    handles = prepare_database()
    try:
        replayer, turns, seconds = replay(ns)
        figures = report(ns, replayer, turns, seconds)
        if ns.json:
            print(json.dumps(figures))
    finally:
        from devtools.stack import stop_services

        stop_services(handles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
