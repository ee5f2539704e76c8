"""Provider request bodies for one turn: the stable prefix first, a cache breakpoint at its end,
the conversation, a second breakpoint at its end, then what changes per turn
(docs/rendering.md#one-call-per-turn-the-provider-request).

Pure functions, standard library only, no Django and no database: the turn call
(`api.turn_call`, through `skills.turn_request`) hands in what the registry rendered, routed
and compacted; this module only lays it out in each provider's wire shape.

Formats (`FORMATS`):

- `anthropic`: the Messages API. `tools`, then `system` as one text block carrying
  `cache_control: {"type": "ephemeral"}`: the provider caches tools + system up to that block
  (its order is tools, system, messages), so the breakpoint is the end of the prefix; the
  conversation's last block carries the second.
- `openai-chat` (Chat Completions) and `openai-responses` (Responses): the system text first
  (a `system` message; `instructions`), the tools; no breakpoint in the body (OpenAI caches
  automatically from the first byte), `prompt_cache_key` = `prefix_sha256`, so the requests
  of one prefix are routed to the same cache.
- `bedrock-converse`: Bedrock's Converse API, `system` = [text, `cachePoint`]; a second
  `cachePoint` block after the conversation's last block.
- `gemini`: `generateContent`; `systemInstruction` and `tools` come before `contents`, and
  Gemini's implicit caching matches a request's leading bytes, so there is no marker to place.

Everything after the breakpoint: the compacted conversation, then one per-turn text (the
render's tail and the cards of this turn's skills) appended to the newest user message, or as
a user message of its own when the conversation ends with something else. So a request's
bytes up to the breakpoint (`stable_part`) are a function of the prefix alone, and the
conversation before the newest message is sent in the bytes the client gave (less any cache
marker in it: the registry places them).

The second breakpoint (anthropic, bedrock-converse; `provider_messages.mark_conversation_end`)
ends the conversation, before the per-turn text: on the next turn the provider reads the whole
history from its cache and writes only what is new. Two breakpoints, of the four both APIs
take (`provider_messages.breakpoint_problems` states the rules).

Input messages are in the neutral shape or hold Anthropic content blocks;
`turns.provider_messages.to_messages` converts them for a format.

The cache report (`cache_report`): the prefix's estimated tokens (`core.tokens`, the same
offline estimate as every token limit here), the smallest prefix the provider caches for the
pinned model (the caller's, from the model catalog: `modelcatalog.selectors.cache_floor`, with
its source; None for a model the catalog does not know) and whether the prefix reaches it.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from core.tokens import estimate_tokens
from turns.provider_messages import append_turn, breakpoint_problems, mark_conversation_end, to_messages

__all__ = [
    "FORMATS",
    "STABLE",
    "ProviderRequest",
    "TurnParts",
    "breakpoint_problems",
    "build_request",
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


@dataclass(frozen=True)
class TurnParts:
    """What one turn's request is built from.

    system, tools: the render's prefix (tools as the content holds them: name, description,
    input_schema); prefix_sha256: its hash. model: the pinned version's `model` settings;
    output_schema: its `output_schema` (or None). messages: the compacted conversation
    (neutral or Anthropic shape). turn_text: what changes per turn (tail and skill cards),
    sent after the conversation. conversation: the same conversation already in the format's
    own shape (turns.provider_input.write), used instead of converting `messages`."""

    system: str
    tools: list[dict[str, Any]]
    prefix_sha256: str
    model: dict[str, Any]
    output_schema: dict[str, Any] | None
    messages: list[dict[str, Any]]
    turn_text: str
    conversation: list[dict[str, Any]] | None = None


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


def prefix_tokens(system: str, tools: list[dict[str, Any]]) -> int:
    """Estimated tokens of the prefix: its system text plus the tools as canonical JSON."""
    tools_text = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if tools else ""
    return estimate_tokens(system) + estimate_tokens(tools_text)


# Estimated prefix tokens by prefix_sha256 (a prefix's hash names its bytes): the estimate
# reads the whole prefix, which a turn otherwise does not, so it is counted once per prefix.
_TOKENS_BY_PREFIX: dict[str, int] = {}
_TOKENS_CACHE_SIZE = 4096


def cache_report(
    *,
    system: str,
    tools: list[dict[str, Any]],
    floor: int | None,
    source: str,
    prefix_sha256: str | None = None,
) -> dict[str, Any]:
    """`{"prefix_tokens", "floor", "cacheable", "reason"}` for a model whose cache floor is
    `floor` (read from `source`); cacheable is None when the floor is unknown (then `source`
    says why, and is the reason). With `prefix_sha256`, the estimate is remembered for it."""
    tokens = _TOKENS_BY_PREFIX.get(prefix_sha256) if prefix_sha256 else None
    if tokens is None:
        tokens = prefix_tokens(system, tools)
        if prefix_sha256:
            if len(_TOKENS_BY_PREFIX) >= _TOKENS_CACHE_SIZE:
                _TOKENS_BY_PREFIX.clear()
            _TOKENS_BY_PREFIX[prefix_sha256] = tokens
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


@dataclass(frozen=True)
class _Settings:
    """The pinned model settings this module forwards."""

    name: str | None
    max_tokens: int | None
    temperature: Any
    top_p: Any
    stop: list[str] | None

    @classmethod
    def of(cls, model: dict[str, Any]) -> "_Settings":
        max_tokens = _number(model, "max_tokens", "max_output_tokens")
        return cls(
            name=model_name(model),
            max_tokens=int(max_tokens) if max_tokens is not None else None,
            temperature=_number(model, "temperature"),
            top_p=_number(model, "top_p"),
            stop=_stop(model),
        )


def _set(target: dict[str, Any], **values: Any) -> dict[str, Any]:
    """`target` with the values that are not None."""
    target.update({key: value for key, value in values.items() if value is not None})
    return target


def _anthropic_body(parts: TurnParts, settings: _Settings, messages: list[Any], notes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if parts.tools:
        body["tools"] = [dict(t) for t in parts.tools]
    body["system"] = [{"type": "text", "text": parts.system, "cache_control": {"type": "ephemeral"}}]
    _set(body, model=settings.name, max_tokens=settings.max_tokens or DEFAULT_MAX_TOKENS)
    _set(body, stop_sequences=settings.stop)
    if parts.output_schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": parts.output_schema}}
    notes += [f"{k} is not sent to this API." for k in ("temperature", "top_p", "top_k") if k in parts.model]
    body["messages"] = messages
    return body


def _openai_chat_body(parts: TurnParts, settings: _Settings, messages: list[Any], notes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "system", "content": parts.system}, *messages]}
    if parts.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
            }
            for t in parts.tools
        ]
    _set(body, model=settings.name, max_completion_tokens=settings.max_tokens, temperature=settings.temperature)
    _set(body, top_p=settings.top_p, stop=settings.stop)
    if parts.output_schema is not None:
        schema = {"name": OUTPUT_SCHEMA_NAME, "schema": parts.output_schema}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    body["prompt_cache_key"] = parts.prefix_sha256
    return body


def _openai_responses_body(
    parts: TurnParts, settings: _Settings, messages: list[Any], notes: list[str]
) -> dict[str, Any]:
    body: dict[str, Any] = {"instructions": parts.system}
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
    _set(body, model=settings.name, max_output_tokens=settings.max_tokens, temperature=settings.temperature)
    _set(body, top_p=settings.top_p)
    if settings.stop:
        notes.append("stop is not sent to this API.")
    if parts.output_schema is not None:
        body["text"] = {"format": {"type": "json_schema", "name": OUTPUT_SCHEMA_NAME, "schema": parts.output_schema}}
    body["prompt_cache_key"] = parts.prefix_sha256
    body["input"] = messages
    return body


def _bedrock_body(parts: TurnParts, settings: _Settings, messages: list[Any], notes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = _set({}, modelId=settings.name)
    body["system"] = [{"text": parts.system}, {"cachePoint": {"type": "default"}}]
    if parts.tools:
        specs = [
            {
                "toolSpec": _set(
                    {"name": t["name"], "inputSchema": {"json": t["input_schema"]}},
                    description=t["description"] or None,
                )
            }
            for t in parts.tools
        ]
        body["toolConfig"] = {"tools": specs}
    inference = _set({}, maxTokens=settings.max_tokens, temperature=settings.temperature, topP=settings.top_p)
    _set(inference, stopSequences=settings.stop)
    if inference:
        body["inferenceConfig"] = inference
    if parts.output_schema is not None:
        notes.append("output_schema is not sent: Converse has no response schema.")
    body["messages"] = messages
    return body


def _gemini_body(parts: TurnParts, settings: _Settings, messages: list[Any], notes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = _set({}, model=settings.name)
    body["systemInstruction"] = {"parts": [{"text": parts.system}]}
    if parts.tools:
        declarations = [
            {"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
            for t in parts.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    generation = _set({}, maxOutputTokens=settings.max_tokens, temperature=settings.temperature, topP=settings.top_p)
    _set(generation, stopSequences=settings.stop)
    if parts.output_schema is not None:
        generation.update(responseMimeType="application/json", responseJsonSchema=parts.output_schema)
    if generation:
        body["generationConfig"] = generation
    body["contents"] = messages
    return body


_BUILDERS = {
    "anthropic": _anthropic_body,
    "openai-chat": _openai_chat_body,
    "openai-responses": _openai_responses_body,
    "bedrock-converse": _bedrock_body,
    "gemini": _gemini_body,
}


def build_request(fmt: str, parts: TurnParts) -> ProviderRequest:
    """The request body for `fmt` (one of FORMATS). Model settings read from the pinned
    `model`: name (or model, id), max_tokens, temperature, top_p, stop, in each API's own
    names; those a format's API does not take are left out and listed in `notes`."""
    builder = _BUILDERS.get(fmt)
    if builder is None:
        raise ValueError(f"Unknown format {fmt!r}; one of {', '.join(FORMATS)}.")
    notes: list[str] = []
    settings = _Settings.of(parts.model)
    if settings.name is None:  # the turn call refuses this (400 at `model`); a preview says it
        notes.append("No model: the pinned version names none (content.model.name); every provider requires one.")
    written = parts.conversation if parts.conversation is not None else to_messages(fmt, parts.messages)
    conversation = mark_conversation_end(fmt, written)
    messages = append_turn(fmt, conversation, parts.turn_text)
    body = builder(parts, settings, messages, notes)
    # The layout keeps the rules by construction; should a conversation ever bring in what it
    # cannot fix, the answer says so rather than sending a request the provider refuses.
    notes += breakpoint_problems(fmt, body)
    return ProviderRequest(fmt, body, notes)


def stable_part(fmt: str, body: dict[str, Any]) -> bytes:
    """The bytes of `body` up to its breakpoint, as canonical JSON: the stable keys, then the
    conversation entries before the per-turn part (openai-chat: its system message). Two
    requests with equal stable parts share the provider's cached prefix."""
    keys, list_key, lead = STABLE[fmt]
    stable = {"keys": {k: body[k] for k in keys if k in body}, "lead": body.get(list_key, [])[:lead]}
    return json.dumps(stable, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
