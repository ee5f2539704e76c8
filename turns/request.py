"""The turn call's request (`POST /sessions/{id}/turn/`, docs/api.md#the-turn-call): every field
checked, and the conversation read into the neutral shape for its `format`
(turns.provider_input), before anything is written."""

import json
import re
from dataclasses import dataclass
from typing import Any

from core import jsonbytes
from core.errors import InvalidContent
from evidence import report as evidence_report
from skills import services as skill_services
from turns import provider_input, providers

FIELDS = {"messages", "invoked", "variables", "prefix_sha256", "format", "k", "model", "window", "response", "usage"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_MODEL_NAME = 200


@dataclass(frozen=True)
class TurnRequest:
    messages: list[dict[str, Any]]
    invoked: list[str] | None
    variables: dict[str, Any] | None
    prefix_sha256: str | None
    format: str | None
    k: int
    # the conversation as read for `format` (turns.provider_input): `messages` is its neutral shape
    conversation: provider_input.Read | None = None
    model: str | None = None
    usage: evidence_report.Usage | None = None  # the previous model call's, as reported
    tools: evidence_report.ToolResults = evidence_report.ToolResults()


def _windowed(messages: Any, size: Any) -> Any:
    """`messages` cut to a valid window of at most `size` (docs/api.md#windows)."""
    if size is None:
        return messages
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= skill_services.MAX_MESSAGES:
        raise InvalidContent(
            "window is out of range.", {"window": [f"A number of messages from 1 to {skill_services.MAX_MESSAGES}."]}
        )
    if not isinstance(messages, list):
        return messages  # check_messages names it
    cut = provider_input.window(messages, size)
    if cut is None:
        raise InvalidContent(
            "No valid window.",
            {"window": [f"None of the last {size} messages is a user message a window can start at."]},
        )
    return cut


def _read(fmt: str | None, messages: Any) -> provider_input.Read | None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return None  # check_messages names what is wrong
    if len(messages) > skill_services.MAX_MESSAGES:
        return None
    try:
        return provider_input.read(fmt, messages)
    except provider_input.Unfit as exc:
        raise InvalidContent("A message does not fit the format.", {exc.path: [exc.message]}) from None


def _check_serialisable(messages: list[dict[str, Any]]) -> None:
    """400 for messages the answer could not carry: a lone surrogate, or not JSON."""
    try:
        if not jsonbytes.serialisable(messages):  # orjson's yes is the standard library's yes
            json.dumps(messages, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidContent("The messages hold text that is not valid Unicode.", {"messages": ["Lone surrogate."]})
    except (TypeError, ValueError, RecursionError):
        raise InvalidContent("The messages are not JSON this can answer.", {"messages": ["Not serialisable."]})


def parse(body: Any) -> TurnRequest:
    """Every field checked, before anything is written; 400 in the contract's shape naming the
    field. messages: as route takes them (at most skills.services.MAX_MESSAGES), in a shape the
    compaction reads; k: 1..MAX_K; invoked: at most 100 skill names; variables: an object
    (checked against the pinned declarations by the render); prefix_sha256: 64 lowercase hex."""
    if body is None:  # no body: as an empty object (the Django lane parses it so), messages missing
        body = {}
    if not isinstance(body, dict):
        raise InvalidContent("Send a JSON object.", {"body": ["Expected a JSON object."]})
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise InvalidContent("Unknown fields.", {name: ["Unknown field."] for name in unknown})
    fmt = body.get("format")
    if fmt is not None and fmt not in providers.FORMATS:
        raise InvalidContent("Unknown format.", {"format": [f"One of {', '.join(providers.FORMATS)}, or absent."]})
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME):
        raise InvalidContent("model is not a model name.", {"model": [f"A name of 1 to {MAX_MODEL_NAME} characters."]})
    # the previous model call's usage, from `response` (in this format) and/or `usage`
    # (evidence.report: 400 for a response of another format, negative or absurd figures)
    usage = evidence_report.reported_usage(fmt, body.get("response"), body.get("usage"))
    # tool errors in the format's own shape, before it is read into the neutral one
    tools = evidence_report.tool_results(body.get("messages"))
    # a conversation in the format's own shape is read into the neutral one (turns.provider_input)
    conversation = _read(fmt, _windowed(body.get("messages"), body.get("window")))
    neutral = conversation.neutral if conversation is not None else body.get("messages")
    messages = skill_services.check_messages(neutral)
    _check_serialisable(messages)
    k = skill_services.check_k(body.get("k"))
    invoked = body.get("invoked")
    if invoked is not None:
        invoked = skill_services.check_names(invoked, "invoked")
    variables = body.get("variables")
    if variables is not None and not isinstance(variables, dict):
        raise InvalidContent("variables must be an object.", {"variables": ["Expected a JSON object."]})
    sha = body.get("prefix_sha256")
    if sha is not None and (not isinstance(sha, str) or not SHA256_RE.fullmatch(sha)):
        raise InvalidContent("prefix_sha256 is not a SHA-256.", {"prefix_sha256": ["64 lowercase hex digits."]})
    return TurnRequest(
        messages=messages,
        invoked=invoked,
        variables=variables,
        prefix_sha256=sha,
        format=fmt,
        k=k,
        conversation=conversation,
        model=model,
        usage=usage,
        tools=tools,
    )
