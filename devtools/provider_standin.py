"""A local stand-in for five model-provider APIs, for tests, evals and a playground
(docs/rendering.md#the-provider-stand-in).

On 127.0.0.1 it serves the paths the official SDKs call (`/v1/messages`, `/v1/chat/completions`,
`/v1/responses`, `/v1beta/models/{model}:generateContent`, `/model/{modelId}/converse`),
refuses in the provider's own error shape what the provider's documents say it refuses
(`check`: model required; roles; the user first where required; tool calls and results paired
by a non-empty id where the provider wants them; at most four cache breakpoints, none on
thinking or empty text; Responses reasoning items followed by their item and carrying an
`encrypted_content` this stand-in issued), and answers scripted replies (`Reply`) with usage.
For Anthropic and Bedrock the usage models the prompt cache (a breakpoint writes its prefix; a
request reads the longest written prefix ending at most LOOKBACK blocks before one of its
breakpoints); for OpenAI and Gemini it counts the bytes shared with an earlier request. Tokens
are bytes / 4, the stand-in's figure.

    with StandIn(script=lambda fmt, body, n: Reply(text="ok")) as provider:
        anthropic.Anthropic(api_key="x", base_url=provider.url).messages.create(**request)
        assert provider.refused == []

Standard library only and nothing of the registry: its rules come from the providers'
documents, so they can judge the registry's requests."""

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

__all__ = ["FORMATS", "LOOKBACK", "Call", "Received", "Reply", "StandIn", "check"]

FORMATS = ("anthropic", "openai-chat", "openai-responses", "gemini", "bedrock-converse")
LOOKBACK = 20  # blocks Anthropic looks back from a breakpoint for a cached prefix (about 20)
BREAKPOINTS = 4  # cache breakpoints Anthropic and Bedrock take in one request
_RESPONSES_ITEMS = ("message", "function_call", "function_call_output", "reasoning")


@dataclass(frozen=True)
class Call:
    """A tool call the scripted model makes."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers: text, tool calls, and (reasoning=True) a Responses
    reasoning item with encrypted_content, or an Anthropic thinking block with its signature."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    reasoning: bool = False


@dataclass
class Received:
    """One request: the body as parsed (gemini: camelCase; the path's model or modelId added),
    its raw bytes, the problems found (refused when any) and the usage answered."""

    format: str
    path: str
    body: dict[str, Any]
    raw: bytes
    problems: list[str]
    usage: dict[str, int] = field(default_factory=dict)


Script = Callable[[str, dict[str, Any], int], Reply]


def _camel(value: Any) -> Any:
    """Keys in camelCase (the Gemini API reads both; the SDK writes some in snake case)."""
    if isinstance(value, dict):
        return {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _model(body: dict[str, Any], key: str = "model") -> list[str]:
    value = body.get(key)
    return [] if isinstance(value, str) and value else [f"{key}: Field required."]


def _merged(messages: list[Any]) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one (Anthropic combines them), content as blocks."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not out or out[-1]["role"] != message.get("role"):
            out.append({"role": message.get("role"), "content": []})
        out[-1]["content"] += _listed(message.get("content"))
    return out


def _listed(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _marked(value: Any) -> list[dict[str, Any]]:
    """Every object carrying cache_control, at any depth (a tool_result's own blocks too)."""
    if isinstance(value, dict):
        return ([value] if "cache_control" in value else []) + [m for v in value.values() for m in _marked(v)]
    return [m for v in value for m in _marked(v)] if isinstance(value, list) else []


def _anthropic_shape(body: dict[str, Any]) -> list[str]:
    problems = _model(body)
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: Field required.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: at least one message is required."]
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return [*problems, f"messages.{i}.role: Input should be 'user' or 'assistant'."]
        content = message.get("content")
        if isinstance(content, list) and not all(isinstance(b, dict) and "type" in b for b in content):
            return [*problems, f"messages.{i}.content: each block needs a type."]
    return problems


def _anthropic_block(t: int, block: dict[str, Any]) -> list[str]:
    kind = block.get("type")
    if kind in ("tool_use", "tool_result"):
        key = "id" if kind == "tool_use" else "tool_use_id"
        if not isinstance(block.get(key), str) or not block[key]:
            return [f"messages.{t}: {kind}.{key} must be a non-empty string."]
    if kind == "thinking" and not isinstance(block.get("signature"), str):
        return [f"messages.{t}: a thinking block needs its signature."]
    return []


def _anthropic_pairs(t: int, turns: list[dict[str, Any]]) -> list[str]:
    """tool_result blocks answer the tool_use blocks of the turn before, first in their turn;
    every tool_use is answered in the turn after."""
    blocks = turns[t]["content"]
    results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
    previous = turns[t - 1]["content"] if t > 0 and turns[t - 1]["role"] == "assistant" else []
    stray = [str(r) for r in results if r not in [b.get("id") for b in previous if b.get("type") == "tool_use"]]
    problems = [f"messages.{t}: `tool_result` blocks without a `tool_use` in the previous message: {stray}"] * bool(
        stray
    )
    if [b.get("type") for b in blocks[: len(results)]] != ["tool_result"] * len(results):
        problems.append(f"messages.{t}: tool_result blocks must come first in the user message.")
    following = turns[t + 1]["content"] if t + 1 < len(turns) else []
    answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
    missing = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use" and b.get("id") not in answered]
    return problems + [
        f"messages.{t}: `tool_use` ids without `tool_result` blocks immediately after: {missing}."
    ] * bool(missing)


def check_anthropic(body: dict[str, Any]) -> list[str]:
    problems = _anthropic_shape(body)
    if any(p.startswith("messages") for p in problems):
        return problems
    turns = _merged(body["messages"])
    if turns[0]["role"] != "user":
        problems.append("messages: the first message must use the user role.")
    for t, turn in enumerate(turns):
        problems += [p for block in turn["content"] for p in _anthropic_block(t, block)]
        problems += _anthropic_pairs(t, turns)
    marks = _marked([body.get("tools"), body.get("system"), body.get("messages")])
    if len(marks) > BREAKPOINTS:
        problems.append(f"A maximum of {BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}.")
    unmarkable = [b for b in marks if b.get("type") in ("thinking", "redacted_thinking") or b == {**b, "text": ""}]
    problems += ["cache_control cannot be set on a thinking block or an empty text block."] if unmarkable else []
    return problems


def check_openai_chat(body: dict[str, Any]) -> list[str]:
    problems = _model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: must be a non-empty array."]
    open_calls: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return [*problems, f"messages[{i}].role: invalid value."]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
            else:
                problems.append(f"messages[{i}]: a 'tool' message must answer a preceding 'tool_calls' ({call_id!r}).")
            continue
        if open_calls:
            problems.append(f"The following tool_call_ids did not have response messages: {', '.join(open_calls)}")
        calls = message.get("tool_calls") or [] if role == "assistant" else []
        open_calls = [c.get("id") for c in calls]
        if any(not isinstance(c, str) or not c for c in open_calls):
            problems.append(f"messages[{i}].tool_calls: an id is required.")
    if open_calls:
        problems.append(f"The following tool_call_ids did not have response messages: {', '.join(open_calls)}")
    return problems


def _responses_item(i: int, items: list[Any], calls: dict[str, bool], issued: set[str] | None) -> list[str]:
    item = items[i]
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if kind not in _RESPONSES_ITEMS:
        return [f"Invalid value for 'input[{i}].type': {kind!r}."]
    if kind in ("message", "reasoning"):
        return _responses_message(i, item) if kind == "message" else _responses_reasoning(i, items, issued)
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        return [f"Invalid 'input[{i}].call_id': empty string."]
    if kind == "function_call_output" and call_id not in calls:
        return [f"No tool call found for function call output with call_id {call_id}."]
    calls[call_id] = kind == "function_call_output"
    return []


def _responses_message(i: int, item: dict[str, Any]) -> list[str]:
    images = [p for p in _listed(item.get("content")) if isinstance(p, dict) and p.get("type") == "input_image"]
    problems = [f"input[{i}]: input_image without a source." for p in images if not {"image_url", "file_id"} & p.keys()]
    if item.get("role") not in ("user", "assistant", "system", "developer"):
        problems.append(f"Invalid value for 'input[{i}].role'.")
    return problems


def _responses_reasoning(i: int, items: list[Any], issued: set[str] | None) -> list[str]:
    following = items[i + 1] if i + 1 < len(items) else None
    if not isinstance(following, dict) or following.get("type", "message") == "reasoning":
        return [f"Item '{items[i].get('id')}' of type 'reasoning' was provided without its required following item."]
    secret = items[i].get("encrypted_content")
    if issued is not None and secret is not None and secret not in issued:
        return [f"input[{i}]: the encrypted content could not be verified."]
    return []


def check_openai_responses(body: dict[str, Any], issued: set[str] | None = None) -> list[str]:
    """`issued`: the encrypted_content values handed out, when the caller knows them."""
    problems = _model(body)
    items = body.get("input")
    if isinstance(items, str):
        return problems
    if not isinstance(items, list):
        return [*problems, "input: must be a string or an array."]
    calls: dict[str, bool] = {}
    for i in range(len(items)):
        problems += _responses_item(i, items, calls, issued)
    return problems + [f"No tool output found for function call {c}." for c, done in calls.items() if not done]


def _gemini_calls(i: int, contents: list[dict[str, Any]]) -> list[str]:
    """A function call turn: after a user turn, answered by as many responses right after."""
    calls = [p["functionCall"] for p in contents[i].get("parts") or [] if "functionCall" in p]
    problems = []
    if i == 0 or contents[i - 1].get("role", "user") != "user":
        problems.append("Please ensure that function call turn comes immediately after a user turn.")
    following = contents[i + 1].get("parts") or [] if i + 1 < len(contents) else []
    responses = [p["functionResponse"] for p in following if "functionResponse" in p]
    if len(responses) != len(calls):
        problems.append(f"contents[{i + 1}]: as many function response parts as function call parts, please.")
    names = sorted(str(c.get("name")) for c in calls)
    if responses and sorted(str(r.get("name")) for r in responses) != names:
        problems.append(f"contents[{i + 1}]: function responses do not name the calls {names}.")
    return problems


def check_gemini(body: dict[str, Any]) -> list[str]:
    body = _camel(body)
    problems = _model(body)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents is not specified."]
    if contents[0].get("role", "user") != "user":
        problems.append("Please ensure that multiturn requests start with a user turn.")
    for i, content in enumerate(contents):
        parts = content.get("parts") or []
        if content.get("role", "user") not in ("user", "model") or not parts:
            problems.append(f"contents[{i}]: a role of user or model and at least one part are required.")
        if any("functionCall" in p for p in parts):
            problems += _gemini_calls(i, contents)
        elif any("functionResponse" in p for p in parts):
            before = contents[i - 1].get("parts") or [] if i else []
            if not any("functionCall" in p for p in before):
                problems.append(f"contents[{i}]: a function response without the function call turn before it.")
    return problems


def _tool_ids(blocks: Any, key: str) -> list[Any]:
    """The toolUseId of each `key` (toolUse, toolResult) block of a Converse content list."""
    return [b[key].get("toolUseId") for b in _listed(blocks) if isinstance(b, dict) and isinstance(b.get(key), dict)]


def _bedrock_shape(i: int, messages: list[dict[str, Any]]) -> str | None:
    role, blocks = messages[i].get("role"), messages[i].get("content")
    if role not in ("user", "assistant"):
        return f"messages.{i}.role: must be user or assistant."
    if i and role == messages[i - 1].get("role"):
        return "A conversation must alternate between user and assistant roles."
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, dict) for b in blocks):
        return f"messages.{i}.content: must be a non-empty list of content blocks."
    return None


def _bedrock_message(i: int, messages: list[dict[str, Any]]) -> list[str]:
    shape = _bedrock_shape(i, messages)
    if shape:
        return [shape]
    blocks = messages[i]["content"]
    blank = any(isinstance(b.get("text"), str) and not b["text"].strip() for b in blocks)
    problems = [f"The text field in the ContentBlock object at messages.{i}.content is blank."] if blank else []
    uses, results = _tool_ids(blocks, "toolUse"), _tool_ids(blocks, "toolResult")
    if any(not isinstance(x, str) or not x for x in [*uses, *results]):
        problems.append(f"messages.{i}: toolUseId must be a non-empty string.")
    called = _tool_ids(messages[i - 1].get("content"), "toolUse") if i else []
    if results and sorted(map(str, results)) != sorted(map(str, called)):
        problems.append(f"The toolResult blocks at messages.{i}.content answer no toolUse of the previous turn.")
    answered = _tool_ids(messages[i + 1].get("content"), "toolResult") if i + 1 < len(messages) else []
    missing = [str(u) for u in uses if u not in answered]
    if missing:
        problems.append(f"Expected toolResult blocks at messages.{i + 1}.content for the Ids: {', '.join(missing)}")
    return problems


def check_bedrock(body: dict[str, Any]) -> list[str]:
    problems = _model(body, "modelId")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return [*problems, "messages: at least one message is required."]
    if messages[0].get("role") != "user":
        problems.append("A conversation must start with a user message.")
    for i in range(len(messages)):
        problems += _bedrock_message(i, messages)
    blocks = [b for m in messages if isinstance(m.get("content"), list) for b in m["content"]]
    if (_tool_ids(blocks, "toolUse") or _tool_ids(blocks, "toolResult")) and not body.get("toolConfig"):
        problems.append("The toolConfig field must be defined when using toolUse and toolResult content blocks.")
    places = [*(body.get("system") or []), *(body.get("toolConfig") or {}).get("tools", []), *blocks]
    points = sum(1 for b in places if isinstance(b, dict) and "cachePoint" in b)
    if points > BREAKPOINTS:
        problems.append(f"The number of cache points ({points}) exceeds the maximum of {BREAKPOINTS}.")
    return problems


def check(fmt: str, body: dict[str, Any]) -> list[str]:
    """The rules `body` (a request body of `fmt`; gemini with `model`, bedrock-converse with
    `modelId` in it, as the turn call lays them out) breaks; [] when none."""
    rules = (check_anthropic, check_openai_chat, check_openai_responses, check_gemini, check_bedrock)
    return dict(zip(FORMATS, rules, strict=True))[fmt](body)


def _tokens(value: Any) -> int:
    return len(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()) // 4


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def _blocks_and_marks(fmt: str, body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The request as blocks in the provider's order (each with its message's role), and the
    indices of the blocks a breakpoint ends."""
    if fmt == "anthropic":
        places = [("", b) for b in [*(body.get("tools") or []), *_listed(body.get("system"))]]
    else:
        places = [("", b) for b in [*(body.get("toolConfig") or {}).get("tools", []), *(body.get("system") or [])]]
    places += [(m["role"], b) for m in body.get("messages") or [] for b in _listed(m.get("content"))]
    blocks: list[Any] = []
    marks: list[int] = []
    for role, block in places:
        if isinstance(block, dict) and "cachePoint" in block:
            marks += [len(blocks) - 1] if blocks else []
            continue
        marks += [len(blocks)] if isinstance(block, dict) and "cache_control" in block else []
        blocks.append([role, _unmarked(block)])
    return blocks, marks


class _PromptCache:
    """Prefixes written at breakpoints, by hash; a read finds the longest one ending within
    LOOKBACK blocks before a breakpoint of the request."""

    def __init__(self) -> None:
        self.written: set[str] = set()
        self.lock = threading.Lock()
        self.earlier: list[bytes] = []

    def anthropic_usage(self, fmt: str, body: dict[str, Any]) -> dict[str, int]:
        blocks, marks = _blocks_and_marks(fmt, body)
        model = body.get("model") or body.get("modelId")
        hashes: list[str] = []
        running = hashlib.sha256(str(model).encode())
        for block in blocks:
            running.update(json.dumps(block, sort_keys=True, separators=(",", ":")).encode())
            hashes.append(running.copy().hexdigest())
        with self.lock:  # the latest written prefix within LOOKBACK blocks before a breakpoint
            reach = [j for m in marks for j in range(max(0, m - LOOKBACK), m + 1) if hashes[j] in self.written]
            self.written.update(hashes[m] for m in marks)
        hit, last = max(reach, default=-1), max(marks, default=-1)
        read = _tokens(blocks[: hit + 1]) if hit >= 0 else 0
        write = _tokens(blocks[: last + 1]) - read if last > hit else 0
        return {"read": read, "write": write, "input": max(0, _tokens(blocks) - read - write)}

    def shared_prefix(self, raw: bytes) -> int:
        with self.lock:
            best = max((len(os.path.commonprefix([e, raw])) for e in self.earlier), default=0)
            self.earlier.append(raw)
        return best // 4


_ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("anthropic", re.compile(r"^/v1/messages$")),
    ("openai-chat", re.compile(r"^/v1/chat/completions$")),
    ("openai-responses", re.compile(r"^/v1/responses$")),
    ("gemini", re.compile(r"^/v1(?:beta)?/models/(?P<model>[^/:]+):generateContent$")),
    ("bedrock-converse", re.compile(r"^/model/(?P<model>[^/]+)/converse$")),
]


class StandIn:
    """The server (`url` once started, by `start` or `with`); script(fmt, body, n) -> Reply
    answers request n (from 0), "ok" by default; `received`: every request, `refused`: those
    that broke a rule."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda fmt, body, n: Reply(text="ok"))
        self.received: list[Received] = []
        self.issued: set[str] = set()  # encrypted_content handed out in Responses reasoning items
        self.cache = _PromptCache()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    @property
    def refused(self) -> list[Received]:
        return [r for r in self.received if r.problems]

    def start(self) -> "StandIn":
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, headers, payload = stand_in.handle(self.path.split("?")[0], raw)
                data = json.dumps(payload).encode()
                self.send_response(status)
                headers = {"content-type": "application/json", "content-length": str(len(data)), **headers}
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, path: str, raw: bytes) -> tuple[int, dict[str, str], Any]:
        """(status, extra headers, JSON payload) for a POST of `raw` to `path`."""
        routed = [(fmt, m) for fmt, pattern in _ROUTES if (m := pattern.match(path))]
        if not routed:
            return 404, {}, {"error": {"message": f"No route {path}."}}
        fmt, match = routed[0]
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return _error(fmt, "The body is not JSON.")
        if fmt == "gemini":
            body = {**_camel(body), "model": unquote(match["model"])}
        elif fmt == "bedrock-converse":
            body = {**body, "modelId": unquote(match["model"])}
        problems = check_openai_responses(body, self.issued) if fmt == "openai-responses" else check(fmt, body)
        received = Received(fmt, path, body, raw, problems)
        with self._lock:
            n = len(self.received)
            self.received.append(received)
        if problems:
            return _error(fmt, " ".join(problems))
        return 200, {}, self._reply(fmt, body, n, self.script(fmt, body, n), raw, received)

    def _reply(self, fmt: str, body: dict[str, Any], n: int, reply: Reply, raw: bytes, got: Received) -> Any:
        if fmt in ("anthropic", "bedrock-converse"):
            got.usage = self.cache.anthropic_usage(fmt, body)
        else:
            cached = self.cache.shared_prefix(raw)
            got.usage = {"read": cached, "write": 0, "input": len(raw) // 4 - cached}
        if fmt == "openai-responses" and reply.reasoning:
            with self._lock:
                self.issued.add(_secret("enc", n))
        return _REPLIES[fmt](n, reply, got.usage, str(body.get("model") or body.get("modelId")))


def _numbered(reply: Reply) -> list[tuple[int, Call]]:
    return list(enumerate(reply.calls))


def _anthropic_reply(n: int, reply: Reply, usage: dict[str, int], model: str) -> dict[str, Any]:
    content: list[Any] = [dict(type="thinking", thinking=f"step {n}", signature=_secret("sig", n))] * reply.reasoning
    content += [{"type": "text", "text": reply.text}] if reply.text else []
    content += [dict(type="tool_use", id=f"toolu_{k}_{n}", name=c.name, input=c.args) for k, c in _numbered(reply)]
    counts = dict(input_tokens=usage["input"], output_tokens=max(1, len(reply.text) // 4))
    counts.update(cache_creation_input_tokens=usage["write"], cache_read_input_tokens=usage["read"])
    out = dict(id=f"msg_{n}", type="message", role="assistant", model=model, content=content, usage=counts)
    return out | dict(stop_reason="tool_use" if reply.calls else "end_turn", stop_sequence=None)


def _chat_reply(n: int, reply: Reply, usage: dict[str, int], model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        functions = [{"name": c.name, "arguments": json.dumps(c.args)} for c in reply.calls]
        message["tool_calls"] = [dict(id=f"call_{n}_{k}", type="function", function=f) for k, f in enumerate(functions)]
    choice = dict(index=0, message=message, finish_reason="tool_calls" if reply.calls else "stop")
    prompt, out = usage["input"] + usage["read"], max(1, len(reply.text) // 4)
    counts: dict[str, Any] = dict(prompt_tokens=prompt, completion_tokens=out, total_tokens=prompt + out)
    counts["prompt_tokens_details"] = {"cached_tokens": usage["read"]}
    return dict(id=f"chatcmpl-{n}", object="chat.completion", created=0, model=model, choices=[choice], usage=counts)


def _responses_reply(n: int, reply: Reply, usage: dict[str, int], model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.reasoning:
        output.append(dict(type="reasoning", id=f"rs_{n}", summary=[], encrypted_content=_secret("enc", n)))
    if reply.text:
        text = [{"type": "output_text", "text": reply.text, "annotations": []}]
        output.append(dict(type="message", id=f"msg_{n}", role="assistant", status="completed", content=text))
    for k, c in enumerate(reply.calls):
        call = dict(type="function_call", id=f"fc_{n}_{k}", call_id=f"call_{n}_{k}", name=c.name)
        output.append(call | dict(arguments=json.dumps(c.args), status="completed"))
    prompt, out = usage["input"] + usage["read"], max(1, len(reply.text) // 4)
    counts: dict[str, Any] = dict(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out)
    counts["input_tokens_details"] = {"cached_tokens": usage["read"]}
    counts["output_tokens_details"] = {"reasoning_tokens": int(reply.reasoning)}
    answer = dict(id=f"resp_{n}", object="response", created_at=0, model=model, status="completed", output=output)
    return answer | dict(parallel_tool_calls=True, tool_choice="auto", tools=[], usage=counts)


def _gemini_reply(n: int, reply: Reply, usage: dict[str, int], model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    parts += [{"functionCall": dict(id=f"fc_{n}_{k}", name=c.name, args=c.args)} for k, c in enumerate(reply.calls)]
    if reply.reasoning and parts:
        parts[0] = {**parts[0], "thoughtSignature": _secret("sig", n)}
    prompt, out = usage["input"] + usage["read"], max(1, len(reply.text) // 4)
    counts = dict(promptTokenCount=prompt, cachedContentTokenCount=usage["read"])
    counts.update(candidatesTokenCount=out, totalTokenCount=prompt + out)
    candidate = dict(content={"role": "model", "parts": parts}, finishReason="STOP", index=0)
    return dict(candidates=[candidate], usageMetadata=counts, modelVersion=model)


def _bedrock_reply(n: int, reply: Reply, usage: dict[str, int], model: str) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    blocks += [{"toolUse": dict(toolUseId=f"tooluse_{k}_{n}", name=c.name, input=c.args)} for k, c in _numbered(reply)]
    out = max(1, len(reply.text) // 4)
    counts = dict(inputTokens=usage["input"], outputTokens=out, cacheReadInputTokens=usage["read"])
    counts.update(cacheWriteInputTokens=usage["write"], totalTokens=sum(usage.values()) + out)
    stop = "tool_use" if reply.calls else "end_turn"
    return dict(output={"message": {"role": "assistant", "content": blocks}}, stopReason=stop, usage=counts)


_REPLIES: dict[str, Callable[[int, Reply, dict[str, int], str], dict[str, Any]]] = dict(
    zip(FORMATS, (_anthropic_reply, _chat_reply, _responses_reply, _gemini_reply, _bedrock_reply), strict=True)
)


def _secret(kind: str, n: int) -> str:
    return hashlib.sha256(f"{kind}-{n}".encode()).hexdigest()


def _error(fmt: str, message: str) -> tuple[int, dict[str, str], Any]:
    """The provider's own error shape, so the SDK raises its own error type."""
    if fmt == "anthropic":
        return 400, {}, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if fmt in ("openai-chat", "openai-responses"):
        return 400, {}, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    if fmt == "gemini":
        return 400, {}, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return 400, {"x-amzn-ErrorType": "ValidationException"}, {"message": message}


if __name__ == "__main__":  # a playground: python -m devtools.provider_standin
    with StandIn() as server:
        print(f"provider stand-in on {server.url}; Ctrl-C stops it")
        threading.Event().wait()
