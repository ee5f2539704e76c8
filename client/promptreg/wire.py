"""A framework's provider request, laid out again by the turn call: the adapters that sit on the
HTTP client a framework's SDK uses (`promptreg.pydantic_ai`, and the TypeScript client's
`registryFetch` does the same for the Vercel AI SDK).

The framework builds its request as usual; `rewrite` takes the conversation from it, runs the
turn call in the request's format (known by its path), and sends the turn's `request` instead:
the pinned system prompt and tools, this turn's text and skill cards, the compacted
conversation, the pinned model settings. Of the framework's body only what the pinned request
does not set is kept (`stream`, `tool_choice`, ...), never the pinned keys. Nothing here
imports an SDK or does I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from promptreg.step import PINNED_KEYS

# The paths the official SDKs post a model call to, by format (a base URL may come before).
PATHS = (("/chat/completions", "openai-chat"), ("/responses", "openai-responses"), ("/messages", "anthropic"))
# The conversation's key in each format's body.
CONVERSATION = {"openai-chat": "messages", "openai-responses": "input", "anthropic": "messages"}
# A request sets at most one output limit; the framework's other spellings are left out.
LIMITS = frozenset({"max_tokens", "max_completion_tokens", "max_output_tokens"})
# The framework's own system text: the pinned system prompt stands in its place.
SYSTEM_ROLES = frozenset({"system", "developer"})


def format_of(path: str) -> str | None:
    """The turn-call format of a model call posted to `path`, or None for any other request."""
    for suffix, fmt in PATHS:
        if path.rstrip("/").endswith(suffix):
            return fmt
    return None


def conversation(fmt: str, body: dict[str, Any]) -> list[Any]:
    """The conversation of a framework's request body, its own system messages left out."""
    found = body.get(CONVERSATION[fmt])
    if isinstance(found, str):  # a Responses input given as one text
        return [{"role": "user", "content": found}]
    if not isinstance(found, list):
        raise ValueError(f"The {fmt} request has no {CONVERSATION[fmt]} list to send through the turn call.")
    return [m for m in found if not (isinstance(m, dict) and m.get("role") in SYSTEM_ROLES)]


def merged(request: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The turn's `request` plus what of the framework's body it does not set (`stream`,
    `tool_choice`, ...): never a pinned key, nor another spelling of an output limit it sets,
    nor `tool_choice` when the pinned version has no tools."""
    skip = set(PINNED_KEYS) | {"model"}
    if LIMITS & request.keys():
        skip |= LIMITS
    if not request.get("tools"):
        skip |= {"tool_choice", "parallel_tool_calls"}
    return {**{k: v for k, v in body.items() if k not in request and k not in skip}, **request}


def tool_names(fmt: str, reply: Any) -> list[str]:
    """The tools a provider's reply (its JSON) asked for, by name, in order."""
    if not isinstance(reply, dict):
        return []
    if fmt == "anthropic":
        return [b.get("name", "") for b in reply.get("content") or [] if b.get("type") == "tool_use"]
    if fmt == "openai-chat":
        message = ((reply.get("choices") or [{}])[0] or {}).get("message") or {}
        return [(c.get("function") or {}).get("name", "") for c in message.get("tool_calls") or []]
    return [i.get("name", "") for i in reply.get("output") or [] if i.get("type") == "function_call"]


@dataclass
class Rewriter:
    """One session's model calls: what the previous call's reply asked for is reported as the
    next turn's `invoked`, and the reply itself as its `response` (the version's evidence)."""

    pinned_model: str | None = None  # the version's model.name: then the framework's is not sent
    previous: dict[str, Any] | None = None
    previous_format: str | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)  # each turn call's answer

    def turn_arguments(self, fmt: str, body: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of `session.turn(...)` for a framework's request `body`: the
        framework's model goes to the turn call only when the version names none (a request
        needs one; the registry checks it against the version's `model.allowed`)."""
        arguments: dict[str, Any] = {"format": fmt}
        if not self.pinned_model and isinstance(body.get("model"), str) and body["model"]:
            arguments["model"] = body["model"]
        if self.previous is not None and self.previous_format == fmt:
            arguments["invoked"] = tool_names(fmt, self.previous)
            arguments["response"] = self.previous
        return arguments

    def body(self, body: dict[str, Any], turn: dict[str, Any]) -> bytes:
        """The bytes to send instead of the framework's body."""
        self.turns.append(turn)
        return json.dumps(merged(turn["request"], body), ensure_ascii=False, separators=(",", ":")).encode()

    def replied(self, fmt: str, raw: bytes) -> None:
        """Keep a JSON reply for the next turn (a stream or an error is not kept)."""
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        self.previous, self.previous_format = (reply, fmt) if isinstance(reply, dict) else (None, None)


__all__ = ["Rewriter", "conversation", "format_of", "merged", "tool_names"]
