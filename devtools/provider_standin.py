"""A local stand-in for five model-provider APIs, for tests, evals and a playground.

It serves, on 127.0.0.1, the request paths the official SDKs call:

| format             | path                                   | SDK pointed at it                                   |
| ------------------ | -------------------------------------- | --------------------------------------------------- |
| `anthropic`        | `POST /v1/messages`                    | `anthropic.Anthropic(base_url=url)`                 |
| `openai-chat`      | `POST /v1/chat/completions`            | `openai.OpenAI(base_url=url + "/v1")`               |
| `openai-responses` | `POST /v1/responses`                   | `openai.OpenAI(base_url=url + "/v1")`               |
| `gemini`           | `POST /v1beta/models/{m}:generateContent`| `genai.Client(http_options={"base_url": url})`   |
| `bedrock-converse` | `POST /model/{modelId}/converse`       | `boto3.client("bedrock-runtime", endpoint_url=url)` |

Each request is checked against the provider's documented request rules (`check`) and
refused, in the provider's own error shape, when it breaks one: the model is required; roles
are the provider's; the conversation starts with the user where the provider wants it (and
alternates for Bedrock); every tool call has its result and every result its call, paired by
a non-empty id (Anthropic `tool_use`/`tool_result` in the next message, results first; Chat
`tool_calls`/`tool` messages straight after; Responses `function_call`/`function_call_output`;
Gemini as many `functionResponse` parts as the turn before had `functionCall` parts; Converse
`toolUse`/`toolResult` in the next message); Anthropic and Bedrock take at most four cache
breakpoints, never on thinking or empty text; a Responses `reasoning` item is followed by the
item it belongs to and carries the `encrypted_content` this stand-in issued.

Sources: https://docs.anthropic.com/en/api/messages, https://docs.anthropic.com/en/docs/build-with-claude/tool-use
(tool_result blocks come first in the user message right after), https://platform.claude.com/docs/en/build-with-claude/prompt-caching
(four breakpoints, a lookback of about 20 blocks), https://platform.openai.com/docs/api-reference/chat,
https://platform.openai.com/docs/api-reference/responses, https://platform.openai.com/docs/guides/reasoning
(reasoning items passed back with their encrypted_content), https://ai.google.dev/gemini-api/docs/function-calling,
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html.

Replies are scripted (`Reply`: text, tool calls, a reasoning item or thinking block) and carry
usage. Anthropic and Bedrock usage models the prompt cache: a breakpoint writes its prefix, and
a later request reads the longest written prefix that ends at most LOOKBACK blocks before one
of its breakpoints; OpenAI and Gemini report the bytes a request shares with an earlier one.
Tokens are bytes / 4, a stand-in's figure, not the provider's.

    with StandIn(script=lambda fmt, body, n: Reply(text="ok")) as provider:
        client = anthropic.Anthropic(api_key="x", base_url=provider.url)
        ...
        assert provider.refused == []

Standard library only; nothing of the registry is imported (the checks are this file's own,
written from the providers' documents, so they can judge the registry's requests)."""

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
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
    """One request: its format, path, body as parsed (gemini: camelCase keys; the model or
    modelId of the path added as `model` / `modelId`), raw bytes, the problems found (refused
    when any), and the usage answered."""

    format: str
    path: str
    body: dict[str, Any]
    raw: bytes
    problems: list[str]
    usage: dict[str, int] = field(default_factory=dict)


Script = Callable[[str, dict[str, Any], int], Reply]


# --- the rules ------------------------------------------------------------------------------------


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


def _merged(messages: list[Any], key: str) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one (Anthropic combines them)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get(key)
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if out and out[-1]["role"] == message.get("role"):
            out[-1][key] += blocks
        else:
            out.append({"role": message.get("role"), key: blocks})
    return out


def _anthropic_marks(body: dict[str, Any]) -> list[Any]:
    def nested(block: Any) -> list[Any]:
        inner = block.get("content") if isinstance(block, dict) else None
        return [block, *[b for i in (inner if isinstance(inner, list) else []) for b in nested(i)]]

    system = body.get("system")
    blocks: list[Any] = list(body.get("tools") or []) + (system if isinstance(system, list) else [])
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            blocks += nested(block)
    return [b for b in blocks if isinstance(b, dict) and "cache_control" in b]


def check_anthropic(body: dict[str, Any]) -> list[str]:
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
    turns = _merged(messages, "content")
    if turns[0]["role"] != "user":
        problems.append("messages: the first message must use the user role.")
    for t, turn in enumerate(turns):
        blocks = turn["content"]
        for block in blocks:
            if block.get("type") in ("tool_use", "tool_result"):
                key = "id" if block["type"] == "tool_use" else "tool_use_id"
                if not isinstance(block.get(key), str) or not block[key]:
                    problems.append(f"messages.{t}: {block['type']}.{key} must be a non-empty string.")
            if block.get("type") == "thinking" and not isinstance(block.get("signature"), str):
                problems.append(f"messages.{t}: a thinking block needs its signature.")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if results:
            previous = turns[t - 1]["content"] if t > 0 and turns[t - 1]["role"] == "assistant" else []
            called = [b.get("id") for b in previous if b.get("type") == "tool_use"]
            for result in results:
                if result not in called:
                    problems.append(
                        f"messages.{t}: unexpected `tool_use_id` found in `tool_result` blocks: {result}. Each "
                        "`tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )
            leading = 0
            while leading < len(blocks) and blocks[leading].get("type") == "tool_result":
                leading += 1
            if leading != len(results):
                problems.append(f"messages.{t}: tool_result blocks must come first in the user message.")
        if uses:
            following = turns[t + 1]["content"] if t + 1 < len(turns) else []
            answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                problems.append(
                    f"messages.{t}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(map(str, missing))}."
                )
    marks = _anthropic_marks(body)
    if len(marks) > BREAKPOINTS:
        problems.append(f"A maximum of {BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}.")
    for block in marks:
        if block.get("type") in ("thinking", "redacted_thinking") or (
            block.get("type") == "text" and not block["text"]
        ):
            problems.append(f"cache_control cannot be set on a {block.get('type')} block that is empty or thinking.")
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
            if call_id not in open_calls:
                problems.append(
                    f"messages[{i}]: messages with role 'tool' must be a response to a preceding message with "
                    f"'tool_calls' ({call_id!r})."
                )
            else:
                open_calls.remove(call_id)
            continue
        if open_calls:
            problems.append(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_calls)}"
            )
            open_calls = []
        for call in message.get("tool_calls") or [] if role == "assistant" else []:
            if not isinstance(call.get("id"), str) or not call["id"]:
                problems.append(f"messages[{i}].tool_calls: an id is required.")
            open_calls.append(call.get("id"))
    if open_calls:
        problems.append(f"The following tool_call_ids did not have response messages: {', '.join(open_calls)}")
    return problems


def check_openai_responses(body: dict[str, Any], issued: set[str] | None = None) -> list[str]:
    problems = _model(body)
    items = body.get("input")
    if isinstance(items, str):
        return problems
    if not isinstance(items, list):
        return [*problems, "input: must be a string or an array."]
    calls: dict[str, bool] = {}
    for i, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind not in _RESPONSES_ITEMS:
            problems.append(f"Invalid value for 'input[{i}].type': {kind!r}.")
            continue
        if kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                problems.append(f"Invalid value for 'input[{i}].role'.")
            content = item.get("content")
            for part in content if isinstance(content, list) else []:
                if part.get("type") == "input_image" and not (part.get("image_url") or part.get("file_id")):
                    problems.append(f"input[{i}]: an input_image needs image_url or file_id.")
        elif kind in ("function_call", "function_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                problems.append(f"Invalid 'input[{i}].call_id': empty string.")
            elif kind == "function_call":
                calls[call_id] = False
            elif call_id not in calls:
                problems.append(f"No tool call found for function call output with call_id {call_id}.")
            else:
                calls[call_id] = True
        else:  # reasoning
            following = items[i + 1] if i + 1 < len(items) else None
            if not isinstance(following, dict) or following.get("type", "message") == "reasoning":
                problems.append(
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its required following item."
                )
            secret = item.get("encrypted_content")
            if issued is not None and secret is not None and secret not in issued:
                problems.append(f"input[{i}]: the encrypted content could not be verified.")
    problems += [f"No tool output found for function call {c}." for c, done in calls.items() if not done]
    return problems


def check_gemini(body: dict[str, Any]) -> list[str]:
    body = _camel(body)
    problems = _model(body)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents is not specified."]
    for i, content in enumerate(contents):
        if content.get("role", "user") not in ("user", "model"):
            problems.append(f"contents[{i}].role: Please use a valid role: user, model.")
        if not content.get("parts"):
            problems.append(f"contents[{i}].parts: must not be empty.")
    if contents[0].get("role", "user") != "user":
        problems.append("Please ensure that multiturn requests start with a user turn.")
    for i, content in enumerate(contents):
        calls = [p["functionCall"] for p in content.get("parts") or [] if "functionCall" in p]
        if calls:
            before = contents[i - 1] if i else None
            if before is None or before.get("role", "user") != "user":
                problems.append(
                    "Please ensure that function call turn comes immediately after a user turn or after a function "
                    "response turn."
                )
            following = contents[i + 1].get("parts") or [] if i + 1 < len(contents) else []
            responses = [p["functionResponse"] for p in following if "functionResponse" in p]
            if len(responses) != len(calls):
                problems.append(
                    "Please ensure that the number of function response parts is equal to the number of function "
                    "call parts of the function call turn."
                )
            names = sorted(str(c.get("name")) for c in calls)
            if responses and sorted(str(r.get("name")) for r in responses) != names:
                problems.append(f"contents[{i + 1}]: function responses do not name the calls {names}.")
        elif any("functionResponse" in p for p in content.get("parts") or []):
            before = contents[i - 1] if i else None
            if before is None or not any("functionCall" in p for p in before.get("parts") or []):
                problems.append(f"contents[{i}]: a function response without the function call turn before it.")
    return problems


def check_bedrock(body: dict[str, Any]) -> list[str]:
    problems = _model(body, "modelId")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages: at least one message is required."]
    if messages[0].get("role") != "user":
        problems.append(
            "A conversation must start with a user message. "
            "Try again with a conversation that starts with a user message."
        )
    used_tools = False
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"messages.{i}.role: must be user or assistant.")
        if i and message.get("role") == messages[i - 1].get("role"):
            problems.append("A conversation must alternate between user and assistant roles.")
        blocks = message.get("content") or []
        if not isinstance(blocks, list) or not blocks or not all(isinstance(b, dict) for b in blocks):
            problems.append(f"messages.{i}.content: must be a non-empty list of content blocks.")
            continue
        for block in blocks:
            if isinstance(block.get("text"), str) and not block["text"].strip():
                problems.append(f"The text field in the ContentBlock object at messages.{i}.content is blank.")
        uses = [b["toolUse"].get("toolUseId") for b in blocks if "toolUse" in b]
        results = [b["toolResult"].get("toolUseId") for b in blocks if "toolResult" in b]
        used_tools = used_tools or bool(uses or results)
        if any(not isinstance(x, str) or not x for x in [*uses, *results]):
            problems.append(f"messages.{i}: toolUseId must be a non-empty string.")
        if results:
            previous = messages[i - 1].get("content") or [] if i else []
            called = [b["toolUse"].get("toolUseId") for b in previous if "toolUse" in b]
            if sorted(map(str, results)) != sorted(map(str, called)):
                problems.append(
                    f"The number of toolResult blocks at messages.{i}.content exceeds the number of toolUse blocks "
                    "of previous turn, or names others."
                )
        if uses:
            following = messages[i + 1].get("content") or [] if i + 1 < len(messages) else []
            answered = {b["toolResult"].get("toolUseId") for b in following if "toolResult" in b}
            missing = [u for u in uses if u not in answered]
            if missing:
                problems.append(
                    f"Expected toolResult blocks at messages.{i + 1}.content for the following Ids: "
                    + ", ".join(map(str, missing))
                )
    if used_tools and not body.get("toolConfig"):
        problems.append("The toolConfig field must be defined when using toolUse and toolResult content blocks.")
    places = [*(body.get("system") or []), *(body.get("toolConfig") or {}).get("tools", [])]
    places += [b for m in messages for b in m.get("content") or []]
    points = sum(1 for b in places if isinstance(b, dict) and "cachePoint" in b)
    if points > BREAKPOINTS:
        problems.append(f"The number of cache points ({points}) exceeds the maximum of {BREAKPOINTS}.")
    return problems


def check(fmt: str, body: dict[str, Any]) -> list[str]:
    """The rules `body` (a request body of `fmt`; gemini with `model`, bedrock-converse with
    `modelId` in it, as the turn call lays them out) breaks; [] when none."""
    checks: dict[str, Callable[[dict[str, Any]], list[str]]] = {
        "anthropic": check_anthropic,
        "openai-chat": check_openai_chat,
        "openai-responses": check_openai_responses,
        "gemini": check_gemini,
        "bedrock-converse": check_bedrock,
    }
    return checks[fmt](body)


# --- the prompt cache -------------------------------------------------------------------------------


def _tokens(value: Any) -> int:
    return len(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()) // 4


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def _blocks_and_marks(fmt: str, body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The request as a list of blocks in the provider's order, and the indices of the blocks
    a breakpoint ends."""
    blocks: list[Any] = []
    marks: list[int] = []

    def add(sequence: list[Any], role: str = "") -> None:
        for block in sequence:
            if fmt == "bedrock-converse" and isinstance(block, dict) and "cachePoint" in block:
                if blocks:
                    marks.append(len(blocks) - 1)
                continue
            if fmt == "anthropic" and isinstance(block, dict) and "cache_control" in block:
                marks.append(len(blocks))
            # a message's role is part of each of its blocks: a block, not a message, is the unit
            blocks.append([role, _unmarked(block)])

    if fmt == "anthropic":
        system = body.get("system")
        add(list(body.get("tools") or []))
        add(system if isinstance(system, list) else [{"type": "text", "text": system}] if system else [])
        for message in body.get("messages") or []:
            content = message.get("content")
            listed = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            add(listed, message["role"])
    else:
        add(list((body.get("toolConfig") or {}).get("tools") or []))
        add(list(body.get("system") or []))
        for message in body.get("messages") or []:
            add(list(message.get("content") or []), message["role"])
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
        with self.lock:
            hit = -1
            for mark in marks:
                for j in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                    if hashes[j] in self.written:
                        hit = max(hit, j)
                        break
            self.written.update(hashes[m] for m in marks)
        read = _tokens(blocks[: hit + 1]) if hit >= 0 else 0
        last = max(marks) if marks else -1
        write = _tokens(blocks[: last + 1]) - read if last > hit else 0
        total = _tokens(blocks)
        return {"read": read, "write": write, "input": max(0, total - read - write)}

    def shared_prefix(self, raw: bytes) -> int:
        with self.lock:
            best = 0
            for earlier in self.earlier:
                n = 0
                for a, b in zip(earlier, raw, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.earlier.append(raw)
        return best // 4


# --- the server -------------------------------------------------------------------------------------


_ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("anthropic", re.compile(r"^/v1/messages$")),
    ("openai-chat", re.compile(r"^/v1/chat/completions$")),
    ("openai-responses", re.compile(r"^/v1/responses$")),
    ("gemini", re.compile(r"^/v1(?:beta)?/models/(?P<model>[^/:]+):generateContent$")),
    ("bedrock-converse", re.compile(r"^/model/(?P<model>[^/]+)/converse$")),
]


class StandIn:
    """The stand-in server: `url` once started (it starts in `__enter__` or `start`).

    script(fmt, body, n) -> Reply answers request n (from 0) of the server; the default says
    "ok". `received` holds every request; `refused` those that broke a rule."""

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
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
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
        if fmt == "openai-responses":
            problems = check_openai_responses(body, self.issued)
        else:
            problems = check(fmt, body)
        with self._lock:
            n = len(self.received)
            received = Received(fmt, path, body, raw, problems)
            self.received.append(received)
        if problems:
            return _error(fmt, " ".join(problems))
        reply = self.script(fmt, body, n)
        payload = self._reply(fmt, body, n, reply, raw, received)
        return 200, {}, payload

    def _reply(self, fmt: str, body: dict[str, Any], n: int, reply: Reply, raw: bytes, got: Received) -> Any:
        if fmt in ("anthropic", "bedrock-converse"):
            usage = self.cache.anthropic_usage(fmt, body)
        else:
            total = len(raw) // 4
            cached = self.cache.shared_prefix(raw)
            usage = {"read": cached, "write": 0, "input": total - cached}
        got.usage = usage
        model = str(body.get("model") or body.get("modelId"))
        out_tokens = max(1, len(reply.text) // 4)
        if fmt == "anthropic":
            content: list[dict[str, Any]] = []
            if reply.reasoning:
                content.append({"type": "thinking", "thinking": f"step {n}", "signature": _secret("sig", n)})
            if reply.text:
                content.append({"type": "text", "text": reply.text})
            content += [
                {"type": "tool_use", "id": f"toolu_{n}_{k}", "name": c.name, "input": c.args}
                for k, c in enumerate(reply.calls)
            ]
            return {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": "tool_use" if reply.calls else "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage["input"],
                    "output_tokens": out_tokens,
                    "cache_creation_input_tokens": usage["write"],
                    "cache_read_input_tokens": usage["read"],
                },
            }
        if fmt == "openai-chat":
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.calls:
                message["tool_calls"] = [
                    {
                        "id": f"call_{n}_{k}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.args)},
                    }
                    for k, c in enumerate(reply.calls)
                ]
            prompt = usage["input"] + usage["read"]
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.calls else "stop"}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": out_tokens,
                    "total_tokens": prompt + out_tokens,
                    "prompt_tokens_details": {"cached_tokens": usage["read"]},
                },
            }
        if fmt == "openai-responses":
            output: list[dict[str, Any]] = []
            if reply.reasoning:
                secret = _secret("enc", n)
                with self._lock:
                    self.issued.add(secret)
                output.append({"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": secret})
            if reply.text:
                output.append(
                    {
                        "type": "message",
                        "id": f"msg_{n}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                    }
                )
            output += [
                {
                    "type": "function_call",
                    "id": f"fc_{n}_{k}",
                    "call_id": f"call_{n}_{k}",
                    "name": c.name,
                    "arguments": json.dumps(c.args),
                    "status": "completed",
                }
                for k, c in enumerate(reply.calls)
            ]
            prompt = usage["input"] + usage["read"]
            return {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 0,
                "model": model,
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": prompt,
                    "input_tokens_details": {"cached_tokens": usage["read"]},
                    "output_tokens": out_tokens,
                    "output_tokens_details": {"reasoning_tokens": 1 if reply.reasoning else 0},
                    "total_tokens": prompt + out_tokens,
                },
            }
        if fmt == "gemini":
            parts: list[dict[str, Any]] = []
            if reply.text:
                parts.append({"text": reply.text})
            parts += [
                {"functionCall": {"id": f"fc_{n}_{k}", "name": c.name, "args": c.args}}
                for k, c in enumerate(reply.calls)
            ]
            if reply.reasoning and parts:
                parts[0] = {**parts[0], "thoughtSignature": _secret("sig", n)}
            prompt = usage["input"] + usage["read"]
            return {
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {
                    "promptTokenCount": prompt,
                    "cachedContentTokenCount": usage["read"],
                    "candidatesTokenCount": out_tokens,
                    "totalTokenCount": prompt + out_tokens,
                },
                "modelVersion": model,
            }
        blocks: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        blocks += [
            {"toolUse": {"toolUseId": f"tooluse_{n}_{k}", "name": c.name, "input": c.args}}
            for k, c in enumerate(reply.calls)
        ]
        return {
            "output": {"message": {"role": "assistant", "content": blocks}},
            "stopReason": "tool_use" if reply.calls else "end_turn",
            "usage": {
                "inputTokens": usage["input"],
                "outputTokens": out_tokens,
                "totalTokens": usage["input"] + usage["read"] + usage["write"] + out_tokens,
                "cacheReadInputTokens": usage["read"],
                "cacheWriteInputTokens": usage["write"],
            },
            "metrics": {"latencyMs": 1},
        }


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


def serve(script: Script | None = None) -> Iterator[StandIn]:
    """A started stand-in for a `with` block or a pytest fixture (`yield from serve()`)."""
    stand_in = StandIn(script).start()
    try:
        yield stand_in
    finally:
        stand_in.close()


if __name__ == "__main__":  # a playground: python -m devtools.provider_standin
    import time

    with StandIn() as server:
        print(f"provider stand-in on {server.url} (Ctrl-C to stop)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
