"""Conversations as the SDKs build them, made JSON for the registry.

A loop appends the model's reply the way each SDK's own docs show: Anthropic's `TextBlock` /
`ToolUseBlock` (or the whole `Message`), OpenAI's `ChatCompletionMessage`, the Responses API's
output items (`ResponseFunctionToolCall`, `ResponseReasoningItem`, ...). They are pydantic
models, not dicts, so `json.dumps` refuses them. `plain` turns them into the JSON each SDK
itself would send (`model_dump(exclude_none=True, mode="json")`), without importing any SDK:
the client depends on no SDK."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A conversation is a few hundred messages of a few levels each; deeper than this is a cycle
# or not a conversation, and is refused with its path rather than a RecursionError.
MAX_DEPTH = 64


def plain(value: Any, *, path: str = "value", depth: int = 0) -> Any:
    """`value` as JSON types (dict, list, str, int, float, bool, None). Pydantic models (every
    official SDK's types) are dumped without their unset `None` fields; an Anthropic `Message`
    (a whole reply) becomes the message it stands for, `{"role", "content"}`, as Anthropic's
    API refuses the reply's other fields (`id`, `usage`, ...) in a request. Anything else is a
    TypeError naming where it is (`messages[3].content[0]`)."""
    if depth > MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels; is it a cycle?")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a string; JSON objects have string keys.")
            out[key] = plain(item, path=f"{path}.{key}", depth=depth + 1)
        return out
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [plain(item, path=f"{path}[{i}]", depth=depth + 1) for i, item in enumerate(value)]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump(exclude_none=True, mode="json")
        if _is_anthropic_message(value):
            dumped = {"role": dumped["role"], "content": dumped["content"]}
        return plain(dumped, path=path, depth=depth + 1)
    raise TypeError(
        f"{path}: an object of type {type(value).__name__} is not JSON; pass a dict, a list, or an SDK "
        f"object with model_dump() (pydantic)."
    )


def plain_messages(messages: Sequence[Any]) -> list[Any]:
    """A conversation for the registry: each message (dict or SDK object) as JSON."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of messages, not {type(messages).__name__}.")
    return [plain(message, path=f"messages[{i}]") for i, message in enumerate(messages)]


def _is_anthropic_message(value: Any) -> bool:
    # By the SDK's own module and class name: a Responses output message also has
    # `type: "message"` and a role, and is sent back whole.
    kind = type(value)
    return kind.__module__.startswith("anthropic.") and kind.__name__ in ("Message", "BetaMessage")
