"""`promptreg eval`: run a suite against a bundle version through real pinned sessions and a
provider's official SDK, and record the result in the registry (docs/evals.md).

Every item goes through a session pinned to the version and the turn call, so rendering,
routing and compaction are what production gets; the request the turn call returns goes to the
provider with its official SDK, which reads its key from the environment as usual
(ANTHROPIC_API_KEY, OPENAI_API_KEY, AWS credentials); the registry never sees it. The replies
are sent to the registry, which scores them itself and reports `eval:<suite>` on the version's
content hash with an in-toto attestation."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from promptreg._core import API
from promptreg.provider_calls import CALLERS, judge_question, judge_verdict, request_sha256, with_model
from promptreg.sync import Registry

# The CLI's provider names and the turn call's `format` each one sends.
FORMATS = {
    "anthropic": "anthropic",
    "openai": "openai-chat",
    "openai-responses": "openai-responses",
    "bedrock": "bedrock-converse",
    "gemini": "gemini",
}


@dataclass
class Prices:
    """USD per million tokens; None when the registry's model catalog does not know the model."""

    input: float | None = None
    output: float | None = None

    def cost(self, usage: dict[str, int]) -> float | None:
        if self.input is None or self.output is None:
            return None
        return (usage.get("input_tokens", 0) * self.input + usage.get("output_tokens", 0) * self.output) / 1e6


@dataclass
class Runner:
    registry: Registry
    bundle: str
    version: int
    provider: str
    base_url: str | None
    model: str | None
    prices: Prices
    max_cost: float | None = None
    timeout: float = 60.0
    spent: float = 0.0
    stopped: str = ""
    done: int = 0
    total: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    judge_versions: dict[tuple[str, str], int] = field(default_factory=dict)

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        fmt = FORMATS[self.provider]
        request = with_model(fmt, request, self.model)
        began = time.monotonic()
        reply = CALLERS[fmt](request, self.base_url, self.timeout, None)
        reply["latency_ms"] = int((time.monotonic() - began) * 1000)
        reply["cost_usd"] = self.prices.cost(reply["usage"])
        return reply

    def _turn(
        self, bundle: str, version: int, messages: list[dict[str, Any]], item: dict[str, Any]
    ) -> tuple[dict[str, Any], str]:
        given = item.get("input", {})
        with self.registry.start_session(
            bundle, version=version, variables=given.get("variables") or None, evaluation=True
        ) as session:
            turn = session.turn(messages, variables=given.get("turn_variables") or None, format=FORMATS[self.provider])
            request = turn["request"]
            return self._send(request), request_sha256(request)

    def _judge(
        self, expectation: dict[str, Any], messages: list[dict[str, Any]], reply: dict[str, Any]
    ) -> dict[str, Any]:
        key = (expectation["bundle"], expectation["content_hash"])
        if key not in self.judge_versions:
            versions = self.registry._all(f"{API}/bundles/{key[0]}/versions/")
            found = [v["number"] for v in versions if v["content_hash"] == key[1]]
            if not found:
                return {"score": None, "reason": f"the judge {key[0]} has no version {key[1][:12]}"}
            self.judge_versions[key] = found[0]
        verdict, _ = self._turn(key[0], self.judge_versions[key], judge_question(messages, reply), {})
        return judge_verdict(verdict["text"])

    def one(self, item: dict[str, Any], run: int) -> dict[str, Any]:
        with self.lock:
            if self.max_cost is not None and self.spent >= self.max_cost:
                self.stopped = f"stopped: the budget of {self.max_cost} USD is spent ({self.spent:.4f} USD)"
            if self.stopped:
                return {"item": item["id"], "run": run, "skipped": True}
        messages = item["input"]["messages"]
        try:
            reply, digest = self._turn(self.bundle, self.version, messages, item)
            judges = {
                str(i): self._judge(e, messages, reply) for i, e in enumerate(item["expect"]) if e["type"] == "judge"
            }
            if judges:
                reply["judges"] = {k: v for k, v in judges.items() if v["score"] is not None}
        except Exception as exc:  # noqa: BLE001 - any provider or network failure marks the item `error`
            reply, digest = {"error": f"{type(exc).__name__}: {exc}"[:1000]}, ""
        with self.lock:
            self.spent += reply.get("cost_usd") or 0.0
            self.done += 1
            bar = "=" * int(30 * self.done / max(self.total, 1))
            print(f"\r[{bar:<30}] {self.done}/{self.total}  {self.spent:.4f} USD", end="", file=sys.stderr, flush=True)
        return {"item": item["id"], "run": run, "request_sha256": digest, "reply": reply}


def run_all(runner: Runner, items: list[dict[str, Any]], runs: int, concurrency: int) -> list[dict[str, Any]]:
    """Every item `runs` times, at most `concurrency` model calls at once, in item order."""
    jobs = [(item, run) for item in items for run in range(1, runs + 1)]
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, 32))) as pool:
        return list(pool.map(lambda job: runner.one(*job), jobs))


def resolve_version(registry: Registry, bundle: str, version: int | None, label: str | None) -> int:
    if version is not None:
        return version
    answer = registry.json("GET", f"{API}/bundles/{bundle}/labels/{label or 'production'}/")
    return int(answer["version"])


def catalog_prices(registry: Registry, provider: str, model: str | None) -> Prices:
    """Prices from the registry's model catalog (GET /api/v1/models/), when it knows the model."""
    if not model:
        return Prices()
    try:
        listed = registry.json("GET", f"{API}/models/")
    except Exception:  # noqa: BLE001 - an older registry without a catalog: cost unknown
        return Prices()
    rows = listed.get("results", listed) if isinstance(listed, dict) else listed
    for row in rows if isinstance(rows, list) else []:
        names = {row.get("name"), *(row.get("aliases") or [])}
        if model in names:
            return Prices(row.get("input_per_mtok"), row.get("output_per_mtok"))
    return Prices()


def estimate(items: list[dict[str, Any]], runs: int, prices: Prices) -> tuple[int, float | None]:
    """Calls and an upper estimate of their cost: each item's text as input (4 characters a
    token, the system prompt not counted) and 1,000 output tokens a call."""
    calls = len(items) * runs
    tokens_in = sum(len(json.dumps(i["input"]["messages"])) // 4 + 2_000 for i in items) * runs
    cost = prices.cost({"input_tokens": tokens_in, "output_tokens": 1_000 * calls})
    return calls, cost


def items_from_jsonl(text: str) -> list[dict[str, Any]]:
    """One suite item per line (blank lines skipped), as docs/evals.md shows."""
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"line {number}: not JSON ({exc})") from None
    return items


def _filled(text: str, row: dict[str, Any]) -> str:
    for name, value in row.items():
        text = text.replace("{{" + name + "}}", value if isinstance(value, str) else json.dumps(value))
    return text


def _prompt_yml_expect(evaluators: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    """GitHub Models' string evaluators as scorers; a row's `expected` alone means "contains it"."""
    expect: list[dict[str, Any]] = []
    for evaluator in evaluators:
        rule = evaluator.get("string") or {}
        for kind, value in rule.items():
            value = _filled(str(value), row)
            if kind == "contains":
                expect.append({"type": "contains", "value": value})
            elif kind == "equals":
                expect.append({"type": "equals", "value": value})
            elif kind in ("startsWith", "endsWith"):
                escaped = re.escape(value)
                expect.append(
                    {"type": "regex", "pattern": f"^{escaped}" if kind == "startsWith" else f"{escaped}\\s*\\z"}
                )
            else:
                raise ValueError(f"evaluator {evaluator.get('name', '?')}: string.{kind} has no scorer here")
        if not rule:
            raise ValueError(f"evaluator {evaluator.get('name', '?')}: only string evaluators can be imported")
    if not expect and row.get("expected") is not None:
        expect.append({"type": "contains", "value": str(row["expected"])})
    return expect


def items_from_prompt_yml(text: str) -> list[dict[str, Any]]:
    """A GitHub Models `.prompt.yml`: each `testData` row becomes an item whose messages are the
    file's user and assistant messages with the row's `{{variables}}` filled in (the system
    message is the bundle's own prompt, so it is left out)."""
    try:
        import yaml
    except ImportError as exc:
        raise ValueError("reading .prompt.yml needs PyYAML: pip install pyyaml") from exc
    doc = yaml.safe_load(text) or {}
    template = [m for m in doc.get("messages", []) if m.get("role") in ("user", "assistant")]
    items = []
    for index, row in enumerate(doc.get("testData") or [], 1):
        messages = [{"role": m["role"], "content": _filled(str(m.get("content", "")), row)} for m in template]
        expect = _prompt_yml_expect(doc.get("evaluators") or [], row)
        if not expect:
            raise ValueError(f"testData row {index}: no evaluator and no `expected` to check")
        items.append({"id": f"row-{index}", "input": {"messages": messages}, "expect": expect})
    if not items:
        raise ValueError("the file has no testData rows")
    return items
