"""What a turn call reports about the previous model call, read into one neutral shape.

The turn call (docs/api.md#the-turn-call) takes `response`, the provider's answer to the
previous `request` in the format's own shape, and/or `usage`, the neutral shape
(`input_tokens`, `output_tokens`, `cache_read_tokens`, `cache_write_tokens`, `model`,
`stop_reason`, `latency_ms`). A field given in `usage` wins over the same figure read from
`response` (`latency_ms` is only ever in `usage`, or in Bedrock's `metrics.latencyMs`).

The neutral `input_tokens` counts every input token, cached or not, so that the measured cached
share is `cache_read_tokens / input_tokens` for every provider. Where a provider reports the
uncached part only (Anthropic and Bedrock: `input_tokens` / `inputTokens` exclude the cache
reads and writes), the reads and writes are added back.

Each provider's real fields:

- anthropic: `usage.input_tokens` (+ reads + writes), `usage.output_tokens`,
  `usage.cache_read_input_tokens`, `usage.cache_creation_input_tokens`, `model`, `stop_reason`;
- openai-chat: `usage.prompt_tokens`, `usage.completion_tokens`,
  `usage.prompt_tokens_details.cached_tokens`, `model`, `choices[0].finish_reason`;
- openai-responses: `usage.input_tokens`, `usage.output_tokens`,
  `usage.input_tokens_details.cached_tokens`, `model`, `incomplete_details.reason` or `status`;
- bedrock-converse: `usage.inputTokens` (+ reads + writes), `usage.outputTokens`,
  `usage.cacheReadInputTokens`, `usage.cacheWriteInputTokens`, `stopReason`, `metrics.latencyMs`
  (no model in the answer: the pinned content's model prices it);
- gemini: `usageMetadata.promptTokenCount`, `candidatesTokenCount` + `thoughtsTokenCount`,
  `usageMetadata.cachedContentTokenCount`, `modelVersion`, `candidates[0].finishReason`.

Tool errors are counted from the tool results a turn's `messages` add since the model's last
answer (the entries after the last assistant / model message: on each turn a client sends the
whole conversation, so counting every tool result would count the old ones again), in the
format's own shape: an Anthropic `tool_result` block with `is_error: true`, a Bedrock
`toolResult` with `status: "error"`, a Gemini `functionResponse` whose `response` has an
`error`, a Responses `function_call_output` with `status: "incomplete"`, and in any format a
tool message or block carrying `is_error: true`.

Pure, standard library only; every refusal is a core.errors.InvalidContent naming the field."""

from dataclasses import dataclass, replace
from typing import Any

from core.errors import InvalidContent

# A bound no real call comes near (the largest context windows hold a few million tokens, and a
# call does not run for a day): above it a figure is a client's bug, refused rather than summed.
MAX_TOKENS = 100_000_000
MAX_LATENCY_MS = 86_400_000
MAX_NAME = 200

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
USAGE_FIELDS = {*TOKEN_FIELDS, "model", "stop_reason", "latency_ms"}


@dataclass(frozen=True)
class Usage:
    """One model call's usage in the neutral shape; None: not reported."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    model: str | None = None
    stop_reason: str | None = None
    latency_ms: int | None = None

    def merged(self, over: "Usage") -> "Usage":
        """This usage with every figure `over` gives replacing its own."""
        given = {name: getattr(over, name) for name in USAGE_FIELDS if getattr(over, name) is not None}
        return replace(self, **given)


@dataclass(frozen=True)
class ToolResults:
    results: int = 0
    errors: int = 0


def _bad(field: str, message: str) -> InvalidContent:
    return InvalidContent(f"{field}: {message}", {field: [message]})


def _count(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field, "Expected a whole number.")
    if value < 0 or value > MAX_TOKENS:
        raise _bad(field, f"Expected 0 to {MAX_TOKENS:,}.")
    return value


def _text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_NAME or "\x00" in value:
        raise _bad(field, f"Expected a string of at most {MAX_NAME} characters.")
    return value


def _checked(usage: Usage, field: str) -> Usage:
    """Every figure in range, and no more cached tokens than input tokens."""
    for name in TOKEN_FIELDS:
        _count(getattr(usage, name), f"{field}.{name}")
    if usage.latency_ms is not None:
        if isinstance(usage.latency_ms, bool) or not isinstance(usage.latency_ms, int):
            raise _bad(f"{field}.latency_ms", "Expected a whole number of milliseconds.")
        if not 0 <= usage.latency_ms <= MAX_LATENCY_MS:
            raise _bad(f"{field}.latency_ms", f"Expected 0 to {MAX_LATENCY_MS:,}.")
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    if usage.input_tokens is not None and cached > usage.input_tokens:
        raise _bad(
            field, "cache_read_tokens + cache_write_tokens exceed input_tokens (which counts every input token)."
        )
    return usage


def neutral_usage(value: Any) -> Usage:
    """The turn call's `usage` object, checked (400 naming the field)."""
    if not isinstance(value, dict):
        raise _bad("usage", "Expected a JSON object.")
    unknown = sorted(set(value) - USAGE_FIELDS)
    if unknown:
        raise InvalidContent("Unknown fields in usage.", {f"usage.{name}": ["Unknown field."] for name in unknown})
    usage = Usage(
        **{name: _count(value.get(name), f"usage.{name}") for name in TOKEN_FIELDS},
        model=_text(value.get("model"), "usage.model"),
        stop_reason=_text(value.get("stop_reason"), "usage.stop_reason"),
        latency_ms=value.get("latency_ms"),
    )
    return _checked(usage, "usage")


def _get(obj: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and len(obj) > key else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _plus(base: Any, *parts: int | None) -> int | None:
    if base is None:
        return None
    return int(base) + sum(p or 0 for p in parts)


def _anthropic(r: dict[str, Any]) -> Usage | None:
    if r.get("type") != "message" or not isinstance(r.get("usage"), dict):
        return None
    u = r["usage"]
    read = _count(u.get("cache_read_input_tokens"), "response.usage.cache_read_input_tokens")
    write = _count(u.get("cache_creation_input_tokens"), "response.usage.cache_creation_input_tokens")
    return Usage(
        input_tokens=_plus(_count(u.get("input_tokens"), "response.usage.input_tokens"), read, write),
        output_tokens=_count(u.get("output_tokens"), "response.usage.output_tokens"),
        cache_read_tokens=read,
        cache_write_tokens=write,
        model=_text(r.get("model"), "response.model"),
        stop_reason=_text(r.get("stop_reason"), "response.stop_reason"),
    )


def _openai_chat(r: dict[str, Any]) -> Usage | None:
    if r.get("object") != "chat.completion" or not isinstance(r.get("choices"), list):
        return None
    u = _obj(r.get("usage"))
    return Usage(
        input_tokens=_count(u.get("prompt_tokens"), "response.usage.prompt_tokens"),
        output_tokens=_count(u.get("completion_tokens"), "response.usage.completion_tokens"),
        cache_read_tokens=_count(
            _get(u, "prompt_tokens_details", "cached_tokens"), "response.usage.prompt_tokens_details.cached_tokens"
        ),
        model=_text(r.get("model"), "response.model"),
        stop_reason=_text(_get(r, "choices", 0, "finish_reason"), "response.choices[0].finish_reason"),
    )


def _openai_responses(r: dict[str, Any]) -> Usage | None:
    if r.get("object") != "response" or not isinstance(r.get("output"), list):
        return None
    u = _obj(r.get("usage"))
    stop = _get(r, "incomplete_details", "reason") or r.get("status")
    return Usage(
        input_tokens=_count(u.get("input_tokens"), "response.usage.input_tokens"),
        output_tokens=_count(u.get("output_tokens"), "response.usage.output_tokens"),
        cache_read_tokens=_count(
            _get(u, "input_tokens_details", "cached_tokens"), "response.usage.input_tokens_details.cached_tokens"
        ),
        model=_text(r.get("model"), "response.model"),
        stop_reason=_text(stop, "response.status"),
    )


def _bedrock(r: dict[str, Any]) -> Usage | None:
    if not isinstance(r.get("output"), dict) or "stopReason" not in r:
        return None
    u = _obj(r.get("usage"))
    read = _count(u.get("cacheReadInputTokens"), "response.usage.cacheReadInputTokens")
    write = _count(u.get("cacheWriteInputTokens"), "response.usage.cacheWriteInputTokens")
    latency = _get(r, "metrics", "latencyMs")
    return Usage(
        input_tokens=_plus(_count(u.get("inputTokens"), "response.usage.inputTokens"), read, write),
        output_tokens=_count(u.get("outputTokens"), "response.usage.outputTokens"),
        cache_read_tokens=read,
        cache_write_tokens=write,
        stop_reason=_text(r.get("stopReason"), "response.stopReason"),
        latency_ms=latency,
    )


def _gemini(r: dict[str, Any]) -> Usage | None:
    if not isinstance(r.get("candidates"), list) and not isinstance(r.get("usageMetadata"), dict):
        return None
    u = _obj(r.get("usageMetadata"))
    output = _count(u.get("candidatesTokenCount"), "response.usageMetadata.candidatesTokenCount")
    thoughts = _count(u.get("thoughtsTokenCount"), "response.usageMetadata.thoughtsTokenCount")
    return Usage(
        input_tokens=_count(u.get("promptTokenCount"), "response.usageMetadata.promptTokenCount"),
        output_tokens=_plus(output, thoughts) if output is not None else thoughts,
        cache_read_tokens=_count(u.get("cachedContentTokenCount"), "response.usageMetadata.cachedContentTokenCount"),
        model=_text(r.get("modelVersion"), "response.modelVersion"),
        stop_reason=_text(_get(r, "candidates", 0, "finishReason"), "response.candidates[0].finishReason"),
    )


READERS = {
    "anthropic": _anthropic,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "bedrock-converse": _bedrock,
    "gemini": _gemini,
}


def response_usage(fmt: str | None, response: Any) -> Usage:
    """The usage in a provider's answer of the session's format `fmt` (the turn's `format`).
    400 when there is no format to read it by, or when `response` is not that format's answer
    (a response of another format than the request is a client's mix-up, not data)."""
    if fmt is None:
        raise _bad("response", "Send `format` with `response`: the response is read in the request's format.")
    if not isinstance(response, dict):
        raise _bad("response", "Expected the provider's answer as a JSON object.")
    usage = READERS[fmt](response)
    if usage is None:
        raise _bad("response", f"This is not a {fmt} response (the format of this turn's request).")
    return _checked(usage, "response")


def reported_usage(fmt: str | None, response: Any, usage: Any) -> Usage | None:
    """The turn's report: `response` read in `fmt`, with `usage`'s figures over it; None when
    neither was sent."""
    if response is None and usage is None:
        return None
    read = response_usage(fmt, response) if response is not None else Usage()
    if usage is not None:
        read = _checked(read.merged(neutral_usage(usage)), "usage")
    return read


# --- tool errors --------------------------------------------------------------------------

_ANSWER_ROLES = {"assistant", "model"}


def _since_answer(messages: list[Any]) -> list[Any]:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and (m.get("role") in _ANSWER_ROLES or m.get("type") == "function_call"):
            return messages[i + 1 :]
    return messages


def _block_result(block: Any) -> bool | None:
    """None: not a tool result; else whether it is an error."""
    if not isinstance(block, dict):
        return None
    if block.get("type") == "tool_result":  # anthropic
        return block.get("is_error") is True
    if isinstance(block.get("toolResult"), dict):  # bedrock-converse
        return block["toolResult"].get("status") == "error" or block["toolResult"].get("is_error") is True
    if isinstance(block.get("functionResponse"), dict):  # gemini
        response = block["functionResponse"].get("response")
        return isinstance(response, dict) and "error" in response
    return None


def tool_results(messages: Any) -> ToolResults:
    """Tool results and errors among the entries after the model's last answer (see above)."""
    if not isinstance(messages, list):
        return ToolResults()
    results = errors = 0
    for m in _since_answer(messages):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" or m.get("type") == "function_call_output":  # chat, neutral, responses
            results += 1
            errors += m.get("is_error") is True or m.get("status") == "incomplete"
            continue
        blocks = m.get("content") if isinstance(m.get("content"), list) else m.get("parts")
        for block in blocks if isinstance(blocks, list) else []:
            found = _block_result(block)
            if found is not None:
                results += 1
                errors += found
    return ToolResults(results=results, errors=errors)
