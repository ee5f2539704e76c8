"""One step of an agent loop with an official SDK client: the turn call, the request sent with
the SDK, the reply appended.

`session.step(client, messages)` is `session.turn(messages, format=...)`, then the SDK's own
`create(**turn["request"])`, then the reply added to the conversation in that format's shape,
ready for the next step. Nothing here imports an SDK: the client is recognised by the module
its class comes from (`anthropic`, `openai`), so the registry client depends on no SDK.

Formats: an `anthropic.Anthropic` client sends `anthropic` requests; an `openai.OpenAI` client
needs `format="openai-responses"` or `format="openai-chat"` (the two APIs take different
conversations, and guessing would send one the other's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from promptreg.messages import plain, plain_messages

STEP_FORMATS = ("anthropic", "openai-chat", "openai-responses")
# The model's file tools over a session's knowledge packs (docs/rendering.md), by name.
FILE_TOOLS = ("ls", "glob", "grep", "read")
# Keys of the pinned prefix and the conversation: a keyword argument may add to a request (or
# set max_tokens, extra_headers, ...), never replace what the session pinned.
PINNED_KEYS = frozenset({"system", "tools", "instructions", "messages", "input", "prompt_cache_key"})


@dataclass(frozen=True)
class ToolCall:
    """A tool the model asked to run: the call's id (to answer it), the tool's name, its input."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Step:
    """What one step did: the turn call's answer, the SDK's reply object, the conversation with
    the reply appended (JSON, in the format's shape), and the tool calls the reply asks for."""

    format: str
    turn: dict[str, Any]
    reply: Any
    messages: list[Any]
    tool_calls: list[ToolCall] = field(default_factory=list)
    text: str = ""

    @property
    def done(self) -> bool:
        """The model asked for no tool: the loop ends here (or waits for the user)."""
        return not self.tool_calls

    def with_tool_results(self, results: Mapping[str, str]) -> list[Any]:
        """The conversation with each call's result (by call id) answered in this format's shape,
        ready for the next step. Every call of the reply must have a result: a provider refuses
        a tool call left unanswered."""
        missing = [call.id for call in self.tool_calls if call.id not in results]
        if missing:
            raise ValueError(f"No result for the tool call(s) {', '.join(missing)}; each call needs one.")
        calls = [call.id for call in self.tool_calls]
        if self.format == "anthropic":
            blocks = [{"type": "tool_result", "tool_use_id": i, "content": results[i]} for i in calls]
            return [*self.messages, {"role": "user", "content": blocks}]
        if self.format == "openai-chat":
            return [*self.messages, *({"role": "tool", "tool_call_id": i, "content": results[i]} for i in calls)]
        return [*self.messages, *({"type": "function_call_output", "call_id": i, "output": results[i]} for i in calls)]


def client_format(client: Any, format: str | None) -> str:
    """The format to ask the turn call for, given the SDK client (sync or async)."""
    module = type(client).__module__.split(".", 1)[0]
    if module == "anthropic":
        expected: tuple[str, ...] = ("anthropic",)
    elif module == "openai":
        expected = ("openai-responses", "openai-chat")
    else:
        raise TypeError(
            f"step() takes an anthropic or openai client (Anthropic, AsyncAnthropic, OpenAI, AsyncOpenAI), "
            f"not {type(client).__name__}; with another, call session.turn(..., format=...) and send turn['request']."
        )
    if format is None:
        if len(expected) > 1:
            raise ValueError("An OpenAI client needs format='openai-responses' or format='openai-chat'.")
        return expected[0]
    if format not in expected:
        raise ValueError(f"A {module} client sends {' or '.join(expected)} requests, not {format!r}.")
    return format


def checked_extra(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's extra keyword arguments for `create(...)`, refused before anything is sent
    when one would replace a pinned key."""
    pinned = sorted(PINNED_KEYS & set(extra))
    if pinned:
        raise ValueError(f"{', '.join(pinned)}: part of the pinned request, not to be replaced in step().")
    return dict(extra)


def send(client: Any, format: str, kwargs: dict[str, Any]) -> Any:
    """The SDK call for `format` (a coroutine for an async client)."""
    if format == "anthropic":
        return client.messages.create(**kwargs)
    if format == "openai-chat":
        return client.chat.completions.create(**kwargs)
    return client.responses.create(**kwargs)


def absorb(format: str, turn: dict[str, Any], reply: Any) -> Step:
    """The step after `reply`: the turn's (compacted) conversation plus the reply, as JSON."""
    messages = list(turn["messages"])
    calls: list[ToolCall] = []
    if format == "anthropic":
        content = plain(reply.content, path="reply.content")
        messages.append({"role": "assistant", "content": content})
        calls = [ToolCall(b["id"], b["name"], b.get("input") or {}) for b in content if b.get("type") == "tool_use"]
        text = "".join(b["text"] for b in content if b.get("type") == "text")
    elif format == "openai-chat":
        message = reply.choices[0].message
        dumped = plain(message, path="reply.choices[0].message")
        messages.append(dumped)
        for call in dumped.get("tool_calls") or []:
            function = call.get("function") or {}
            calls.append(ToolCall(call["id"], function.get("name", ""), _arguments(function.get("arguments"))))
        text = dumped.get("content") or ""
    else:
        items = plain_messages(list(reply.output))
        messages.extend(items)  # reasoning items too: a reasoning model needs them back
        for item in items:
            if item.get("type") == "function_call":
                calls.append(ToolCall(item["call_id"], item.get("name", ""), _arguments(item.get("arguments"))))
        text = getattr(reply, "output_text", "") or ""
    return Step(format=format, turn=turn, reply=reply, messages=messages, tool_calls=calls, text=text)


def _arguments(raw: Any) -> dict[str, Any]:
    # OpenAI sends a call's arguments as a JSON string the model wrote; one that does not parse
    # is handed over as {"_raw": text}, for the tool to refuse, rather than ending the loop.
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


__all__ = ["STEP_FORMATS", "Step", "ToolCall"]
