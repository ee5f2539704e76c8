"""Provider request bodies for one turn: the stable prefix first, one cache breakpoint at its end,
then everything that changes per turn (docs/rendering.md#one-call-per-turn-the-provider-request).

Pure functions, standard library only, no Django and no database: the turn call
(`sessions_app.turn_call`) hands in what the registry rendered, routed and compacted; this
module only lays it out in each provider's wire shape.

Formats (`FORMATS`):

- `anthropic`: the Messages API. `tools`, then `system` as one text block carrying
  `cache_control: {"type": "ephemeral"}`: the provider caches tools + system up to that block
  (its order is tools, system, messages), so the breakpoint is the end of the prefix.
- `openai-chat` (Chat Completions) and `openai-responses` (Responses): the system text first
  (a `system` message; `instructions`), the tools; no breakpoint in the body (OpenAI caches
  automatically from the first byte), `prompt_cache_key` = `prefix_sha256`, so the requests
  of one prefix are routed to the same cache.
- `bedrock-converse`: Bedrock's Converse API, `system` = [text, `cachePoint`].
- `gemini`: `generateContent`; `systemInstruction` and `tools` come before `contents`, and
  Gemini's implicit caching matches a request's leading bytes, so there is no marker to place.

Everything after the breakpoint: the compacted conversation, then one per-turn text (the
render's tail and the cards of this turn's skills) appended to the newest user message, or as
a user message of its own when the conversation ends with something else. So a request's
bytes up to the breakpoint (`stable_part`) are a function of the prefix alone, and the
conversation before the newest message is sent in the bytes the client gave.

Input messages are in the neutral shape (OpenAI Chat: `role`, `content` as text or a list of
`{"type": "text", "text"}` parts, assistant `tool_calls`, `tool` messages with
`tool_call_id`), and may hold Anthropic content blocks (`tool_use`, `tool_result`); other
blocks are passed on as they are. `to_messages` converts them for a format.

The cache report (`cache_report`): the prefix's estimated tokens (`core.tokens`, the same
offline estimate as every token limit here), the smallest prefix the provider caches for the
pinned model (`FLOORS`, with sources; None for a model this table does not know) and whether
the prefix reaches it.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from core.tokens import estimate_tokens

__all__ = [
    "FLOORS",
    "FORMATS",
    "STABLE",
    "ProviderRequest",
    "TurnParts",
    "build_request",
    "cache_floor",
    "cache_report",
    "prefix_tokens",
    "stable_part",
    "to_messages",
]

FORMATS = ("anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini")
# Where each format's stable part is: (top-level keys, the conversation's key, how many of its
# first entries). Everything else in a body changes per turn.
STABLE: dict[str, tuple[list[str], str, int]] = {
    "anthropic": (["tools", "system"], "messages", 0),
    "openai-chat": (["tools"], "messages", 1),
    "openai-responses": (["instructions", "tools"], "input", 0),
    "bedrock-converse": (["toolConfig", "system"], "messages", 0),
    "gemini": (["systemInstruction", "tools"], "contents", 0),
}
# Anthropic's Messages API requires max_tokens; used when the pinned model settings give none.
DEFAULT_MAX_TOKENS = 4096
OUTPUT_SCHEMA_NAME = "output"

# The smallest prefix each provider caches, in tokens, by model family: (format family, model
# name pattern, floor, source). First match wins; patterns are matched against the pinned
# model name, lower-cased, with a provider prefix ("anthropic.", "us.", "models/") removed.
# Below its floor a prefix is processed at the full price and nothing says so.
_ANTHROPIC_DOC = "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (2026)"
_OPENAI_DOC = "https://platform.openai.com/docs/guides/prompt-caching: prompts of 1,024 tokens or more"
_GEMINI_DOC = "https://ai.google.dev/gemini-api/docs/caching (implicit caching, updated 2026-10)"
_BEDROCK_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html"
FLOORS: list[tuple[str, str, int, str]] = [
    # Anthropic (and the same models on Bedrock): 4,096 for Opus 4.5/4.6 and Haiku 4.5;
    # 2,048 for Haiku 3/3.5; 1,024 for Sonnet 3.7/4/4.5/4.6 and Opus 4/4.1.
    ("claude", r"claude-(opus-4-[56]|haiku-4-5)", 4096, _ANTHROPIC_DOC),
    ("claude", r"claude-(3-5-haiku|3-haiku|haiku-3)", 2048, _ANTHROPIC_DOC),
    ("claude", r"claude-(sonnet-4|opus-4|3-7-sonnet|opus-4-1)", 1024, _ANTHROPIC_DOC),
    ("claude", r"claude-3-opus", 1024, _ANTHROPIC_DOC),
    # Amazon Nova on Bedrock: 1,000 tokens per cache checkpoint.
    ("nova", r"nova-(micro|lite|pro|premier)", 1000, _BEDROCK_DOC),
    # OpenAI: every model with prompt caching (gpt-4o and newer, o-series), 1,024 tokens.
    ("openai", r"(gpt-4o|gpt-4\.1|gpt-5|o1|o3|o4)", 1024, _OPENAI_DOC),
    # Gemini implicit caching: 2,048 for 2.5 Flash and Pro, 4,096 for 3.x.
    ("gemini", r"gemini-2\.5-(flash|pro)", 2048, _GEMINI_DOC),
    ("gemini", r"gemini-3", 4096, _GEMINI_DOC),
]
_FLOORS = [(family, re.compile(pattern), floor, source) for family, pattern, floor, source in FLOORS]
_MODEL_PREFIX = re.compile(r"^(?:models/|(?:us|eu|apac|global)\.)?(?:anthropic\.|amazon\.)?")


@dataclass(frozen=True)
class TurnParts:
    """What one turn's request is built from.

    system, tools: the render's prefix (tools as the content holds them: name, description,
    input_schema); prefix_sha256: its hash. model: the pinned version's `model` settings;
    output_schema: its `output_schema` (or None). messages: the compacted conversation
    (neutral or Anthropic shape). turn_text: what changes per turn (tail and skill cards),
    sent after the conversation."""

    system: str
    tools: list[dict[str, Any]]
    prefix_sha256: str
    model: dict[str, Any]
    output_schema: dict[str, Any] | None
    messages: list[dict[str, Any]]
    turn_text: str


@dataclass(frozen=True)
class ProviderRequest:
    """A provider request body of `format`; its stable part (the bytes up to the breakpoint) is
    where STABLE says."""

    format: str
    body: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def reuse(self) -> dict[str, Any]:
        """What a client holding this prefix may be sent without: {"keys", "list", "messages"}
        (docs/api.md#the-turn-call)."""
        keys, list_key, lead = STABLE[self.format]
        return {"keys": [k for k in keys if k in self.body], "list": list_key, "messages": lead}

    def without_stable(self) -> dict[str, Any]:
        """The body less its stable part (what `reuse` says to put back)."""
        keys, list_key, lead = STABLE[self.format]
        body = {k: v for k, v in self.body.items() if k not in keys}
        body[list_key] = self.body[list_key][lead:]
        return body


def model_name(model: dict[str, Any]) -> str | None:
    """The pinned model's name: the content's `model.name` (or `model.model`, `model.id`)."""
    for key in ("name", "model", "id"):
        value = model.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def cache_floor(model: str | None) -> tuple[int | None, str]:
    """(floor in tokens, source) for a model name; (None, why) when the table does not know it."""
    if not model:
        return None, "The pinned version names no model (content.model.name)."
    name = _MODEL_PREFIX.sub("", model.lower())
    for _family, pattern, floor, source in _FLOORS:
        if pattern.search(name):
            return floor, source
    return None, f"Model {model!r} is not in the registry's cache-floor table (core/providers.py FLOORS)."


def prefix_tokens(system: str, tools: list[dict[str, Any]]) -> int:
    """Estimated tokens of the prefix: its system text plus the tools as canonical JSON."""
    tools_text = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if tools else ""
    return estimate_tokens(system) + estimate_tokens(tools_text)


def cache_report(*, system: str, tools: list[dict[str, Any]], model: dict[str, Any]) -> dict[str, Any]:
    """`{"prefix_tokens", "floor", "cacheable", "reason"}`; cacheable is None when the floor
    is unknown (the reason says so)."""
    tokens = prefix_tokens(system, tools)
    floor, source = cache_floor(model_name(model))
    if floor is None:
        return {"prefix_tokens": tokens, "floor": None, "cacheable": None, "reason": source}
    if tokens >= floor:
        reason = f"About {tokens} prefix tokens, at least the {floor} this model caches ({source})."
        return {"prefix_tokens": tokens, "floor": floor, "cacheable": True, "reason": reason}
    reason = (
        f"About {tokens} prefix tokens, below the {floor} this model caches ({source}): the provider will "
        "not cache it; a longer stable prefix (more of the system prompt, DUTY.md) would be."
    )
    return {"prefix_tokens": tokens, "floor": floor, "cacheable": False, "reason": reason}


# --- messages -------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"arguments": value}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {}


# A message as parts: ("text", str) | ("call", id, name, args) | ("result", id, content, is_error) | ("raw", block)
Part = tuple[Any, ...]


def _parts(message: dict[str, Any]) -> tuple[str, list[Part]]:
    """The message's role in the conversation ("user" or "assistant", or system/developer as
    given) and its parts."""
    role = message.get("role", "user")
    content = message.get("content")
    if role in ("tool", "function"):
        return "user", [("result", message.get("tool_call_id") or message.get("name") or "", content, False)]
    parts: list[Part] = []
    if isinstance(content, str):
        if content:
            parts.append(("text", content))
    elif isinstance(content, list):
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(("text", block["text"]))
            elif kind == "tool_use":
                parts.append(("call", block.get("id", ""), block.get("name", ""), _arguments(block.get("input"))))
            elif kind == "tool_result":
                parts.append(
                    ("result", block.get("tool_use_id", ""), block.get("content", ""), bool(block.get("is_error")))
                )
            else:
                parts.append(("raw", block))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            function = call.get("function") or {}
            parts.append(("call", call.get("id", ""), function.get("name", ""), _arguments(function.get("arguments"))))
    return role, parts


def _plain(message: dict[str, Any]) -> bool:
    """A text-only neutral message (sent as it is, so its bytes stay the client's)."""
    return (
        isinstance(message.get("content"), str)
        and not message.get("tool_calls")
        and message.get("role")
        in (
            "user",
            "assistant",
        )
    )


def _merge_roles(messages: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Consecutive messages of one role merged (Bedrock and Gemini want the roles to alternate)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {**merged[-1], key: [*merged[-1][key], *message[key]]}
        else:
            merged.append(message)
    return merged


def _anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if _plain(message) or (message.get("role") in ("user", "assistant") and not message.get("tool_calls")):
            out.append({"role": message["role"], "content": message.get("content") or ""})
            continue
        role, parts = _parts(message)
        blocks: list[Any] = []
        for part in parts:
            if part[0] == "text":
                blocks.append({"type": "text", "text": part[1]})
            elif part[0] == "call":
                blocks.append({"type": "tool_use", "id": part[1], "name": part[2], "input": part[3]})
            elif part[0] == "result":
                block = {"type": "tool_result", "tool_use_id": part[1], "content": part[2] if part[2] else ""}
                if part[3]:
                    block["is_error"] = True
                blocks.append(block)
            else:
                blocks.append(part[1])
        out.append({"role": "assistant" if role == "assistant" else "user", "content": blocks})
    return out


def _openai_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if not any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in blocks):
            out.append(message)  # already the Chat Completions shape
            continue
        role, parts = _parts(message)
        texts = [p[1] for p in parts if p[0] == "text"]
        calls = [p for p in parts if p[0] == "call"]
        if role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                item["tool_calls"] = [
                    {"id": c[1], "type": "function", "function": {"name": c[2], "arguments": json.dumps(c[3])}}
                    for c in calls
                ]
            out.append(item)
            continue
        for part in parts:
            if part[0] == "result":
                out.append({"role": "tool", "tool_call_id": part[1], "content": _text_of(part[2])})
        if texts:
            out.append({"role": role, "content": "\n".join(texts)})
    return out


def _openai_responses(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if _plain(message) or message.get("role") in ("system", "developer"):
            out.append({"role": message["role"], "content": _text_of(message.get("content"))})
            continue
        role, parts = _parts(message)
        texts = [p[1] for p in parts if p[0] == "text"]
        if texts:
            out.append({"role": "assistant" if role == "assistant" else "user", "content": "\n".join(texts)})
        for part in parts:
            if part[0] == "call":
                out.append(
                    {"type": "function_call", "call_id": part[1], "name": part[2], "arguments": json.dumps(part[3])}
                )
            elif part[0] == "result":
                out.append({"type": "function_call_output", "call_id": part[1], "output": _text_of(part[2])})
    return out


def _bedrock(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        role, parts = _parts(message)
        blocks: list[dict[str, Any]] = []
        for part in parts:
            if part[0] == "text":
                if part[1].strip():  # Bedrock refuses blank text blocks
                    blocks.append({"text": part[1]})
            elif part[0] == "call":
                blocks.append({"toolUse": {"toolUseId": part[1], "name": part[2], "input": part[3]}})
            elif part[0] == "result":
                result: dict[str, Any] = {"toolUseId": part[1], "content": [{"text": _text_of(part[2]) or " "}]}
                if part[3]:
                    result["status"] = "error"
                blocks.append({"toolResult": result})
            elif isinstance(part[1], dict) and "type" not in part[1]:
                blocks.append(part[1])  # a Converse block given as it is
        if blocks:
            out.append({"role": "assistant" if role == "assistant" else "user", "content": blocks})
    return _merge_roles(out, "content")


def _gemini(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    names: dict[str, str] = {}  # a tool result names its function in Gemini: found by call id
    for message in messages:
        role, parts = _parts(message)
        items: list[dict[str, Any]] = []
        for part in parts:
            if part[0] == "text":
                items.append({"text": part[1]})
            elif part[0] == "call":
                names[part[1]] = part[2]
                items.append({"functionCall": {"name": part[2], "args": part[3]}})
            elif part[0] == "result":
                name = names.get(part[1], part[1] or "tool")
                items.append({"functionResponse": {"name": name, "response": {"result": _text_of(part[2])}}})
            elif isinstance(part[1], dict) and "type" not in part[1]:
                items.append(part[1])
        if items:
            out.append({"role": "model" if role == "assistant" else "user", "parts": items})
    return _merge_roles(out, "parts")


_CONVERT = {
    "anthropic": _anthropic,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "bedrock-converse": _bedrock,
    "gemini": _gemini,
}


def to_messages(fmt: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation in `fmt`'s shape. Text-only messages keep their content as given;
    system or developer messages inside the conversation become user text for the formats
    without such a role in their conversation (anthropic, bedrock-converse, gemini)."""
    if fmt in ("anthropic", "bedrock-converse", "gemini"):
        messages = [
            {"role": "user", "content": m.get("content")} if m.get("role") in ("system", "developer") else m
            for m in messages
        ]
    return _CONVERT[fmt](messages)


def _append_turn(fmt: str, messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The per-turn text after the conversation: a block of the newest message when it is the
    user's (so the roles still alternate), else a user message of its own."""
    if not text:
        return messages
    last = messages[-1] if messages else None
    if fmt == "anthropic":
        if last and last.get("role") == "user":
            content = last["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            return [*messages[:-1], {**last, "content": [*blocks, {"type": "text", "text": text}]}]
        return [*messages, {"role": "user", "content": text}]
    if fmt == "bedrock-converse":
        if last and last.get("role") == "user":
            return [*messages[:-1], {**last, "content": [*last["content"], {"text": text}]}]
        return [*messages, {"role": "user", "content": [{"text": text}]}]
    if fmt == "gemini":
        if last and last.get("role") == "user":
            return [*messages[:-1], {**last, "parts": [*last["parts"], {"text": text}]}]
        return [*messages, {"role": "user", "parts": [{"text": text}]}]
    return [*messages, {"role": "user", "content": text}]  # OpenAI: consecutive user messages are fine


# --- request bodies -----------------------------------------------------------------------------


def _stop(model: dict[str, Any]) -> list[str] | None:
    stop = model.get("stop", model.get("stop_sequences"))
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    return None


def _number(model: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = model.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def build_request(fmt: str, parts: TurnParts) -> ProviderRequest:
    """The request body for `fmt` (one of FORMATS). Model settings read from the pinned
    `model`: name (or model, id), max_tokens, temperature, top_p, top_k, stop; those a format's
    API does not take are left out (listed in `notes`)."""
    model = parts.model
    name = model_name(model)
    max_tokens = _number(model, "max_tokens", "max_output_tokens")
    temperature = _number(model, "temperature")
    top_p = _number(model, "top_p")
    stop = _stop(model)
    messages = _append_turn(fmt, to_messages(fmt, parts.messages), parts.turn_text)
    notes: list[str] = []
    body: dict[str, Any] = {}
    schema = parts.output_schema
    if fmt == "anthropic":
        if parts.tools:
            body["tools"] = [dict(t) for t in parts.tools]
        body["system"] = [{"type": "text", "text": parts.system, "cache_control": {"type": "ephemeral"}}]
        if name:
            body["model"] = name
        body["max_tokens"] = int(max_tokens) if max_tokens is not None else DEFAULT_MAX_TOKENS
        if stop:
            body["stop_sequences"] = stop
        if schema is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        notes += [f"{k} is not sent to this API." for k in ("temperature", "top_p", "top_k") if k in model]
        body["messages"] = messages
        return ProviderRequest(fmt, body, notes)
    if fmt == "openai-chat":
        body["messages"] = [{"role": "system", "content": parts.system}, *messages]
        if parts.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
                }
                for t in parts.tools
            ]
        if name:
            body["model"] = name
        if max_tokens is not None:
            body["max_completion_tokens"] = int(max_tokens)
        if temperature is not None:
            body["temperature"] = temperature
        if top_p is not None:
            body["top_p"] = top_p
        if stop:
            body["stop"] = stop
        if schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": OUTPUT_SCHEMA_NAME, "schema": schema},
            }
        body["prompt_cache_key"] = parts.prefix_sha256
        return ProviderRequest(fmt, body, notes)
    if fmt == "openai-responses":
        body["instructions"] = parts.system
        if parts.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                    "strict": False,
                }
                for t in parts.tools
            ]
        if name:
            body["model"] = name
        if max_tokens is not None:
            body["max_output_tokens"] = int(max_tokens)
        if temperature is not None:
            body["temperature"] = temperature
        if top_p is not None:
            body["top_p"] = top_p
        if schema is not None:
            body["text"] = {"format": {"type": "json_schema", "name": OUTPUT_SCHEMA_NAME, "schema": schema}}
        body["prompt_cache_key"] = parts.prefix_sha256
        body["input"] = messages
        return ProviderRequest(fmt, body, notes)
    if fmt == "bedrock-converse":
        if name:
            body["modelId"] = name
        body["system"] = [{"text": parts.system}, {"cachePoint": {"type": "default"}}]
        if parts.tools:
            specs = []
            for t in parts.tools:
                spec: dict[str, Any] = {"name": t["name"], "inputSchema": {"json": t["input_schema"]}}
                if t.get("description"):
                    spec["description"] = t["description"]
                specs.append({"toolSpec": spec})
            body["toolConfig"] = {"tools": specs}
        inference: dict[str, Any] = {}
        if max_tokens is not None:
            inference["maxTokens"] = int(max_tokens)
        if temperature is not None:
            inference["temperature"] = temperature
        if top_p is not None:
            inference["topP"] = top_p
        if stop:
            inference["stopSequences"] = stop
        if inference:
            body["inferenceConfig"] = inference
        if schema is not None:
            notes.append("output_schema is not sent: Converse has no response schema.")
        body["messages"] = messages
        return ProviderRequest(fmt, body, notes)
    if fmt == "gemini":
        if name:
            body["model"] = name
        body["systemInstruction"] = {"parts": [{"text": parts.system}]}
        if parts.tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
                        for t in parts.tools
                    ]
                }
            ]
        generation: dict[str, Any] = {}
        if max_tokens is not None:
            generation["maxOutputTokens"] = int(max_tokens)
        if temperature is not None:
            generation["temperature"] = temperature
        if top_p is not None:
            generation["topP"] = top_p
        if stop:
            generation["stopSequences"] = stop
        if schema is not None:
            generation["responseMimeType"] = "application/json"
            generation["responseJsonSchema"] = schema
        if generation:
            body["generationConfig"] = generation
        body["contents"] = messages
        return ProviderRequest(fmt, body, notes)
    raise ValueError(f"Unknown format {fmt!r}; one of {', '.join(FORMATS)}.")


def stable_part(fmt: str, body: dict[str, Any]) -> bytes:
    """The bytes of `body` up to its breakpoint, as canonical JSON: the stable keys, then the
    conversation entries before the per-turn part (openai-chat: its system message). Two
    requests with equal stable parts share the provider's cached prefix."""
    keys, list_key, lead = STABLE[fmt]
    stable = {"keys": {k: body[k] for k in keys if k in body}, "lead": body.get(list_key, [])[:lead]}
    return json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
