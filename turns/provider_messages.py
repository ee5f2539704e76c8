"""The conversation of a turn in each provider's shape (turns.providers lays out the rest).

Input messages are in the neutral shape (OpenAI Chat: `role`, `content` as text or a list of
`{"type": "text", "text"}` parts, assistant `tool_calls`, `tool` messages with `tool_call_id`)
and may hold Anthropic content blocks (`tool_use`, `tool_result`); other blocks are passed on
as they are. Pure, standard library only."""

import json
from typing import Any

from turns.provider_input import Unfit

__all__ = [
    "BREAKPOINT_LIMIT",
    "LOOKBACK_STEP",
    "append_turn",
    "breakpoint_problems",
    "conversation_problem",
    "convert_run",
    "mark_conversation_end",
    "to_messages",
]


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
        if merged and merged[-1].get("role", "user") == message.get("role", "user"):
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
        raws = [p[1] for p in parts if p[0] == "raw"]
        if raws:  # a chat message with images: its parts in the Responses shape
            kind = "output_text" if role == "assistant" else "input_text"
            content: list[Any] = []
            for part in parts:
                if part[0] == "text":
                    content.append({"type": kind, "text": part[1]})
                elif part[0] == "raw":
                    content.append(_responses_part(part[1]))
            out.append({"role": "assistant" if role == "assistant" else "user", "content": content})
        elif texts:
            out.append({"role": "assistant" if role == "assistant" else "user", "content": "\n".join(texts)})
        for part in parts:
            if part[0] == "call":
                out.append(
                    {"type": "function_call", "call_id": part[1], "name": part[2], "arguments": json.dumps(part[3])}
                )
            elif part[0] == "result":
                out.append({"type": "function_call_output", "call_id": part[1], "output": _text_of(part[2])})
    return out


def _responses_part(block: Any) -> dict[str, Any]:
    """A chat content part in the Responses shape; Unfit for one Responses cannot carry."""
    if isinstance(block, dict) and block.get("type") == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str):
            part: dict[str, Any] = {"type": "input_image", "image_url": url}
            if isinstance(image, dict) and isinstance(image.get("detail"), str):
                part["detail"] = image["detail"]
            return part
    if isinstance(block, dict) and block.get("type") in _RESPONSES_PARTS:
        return block
    raise _unfit("openai-responses", block)


_RESPONSES_PARTS = ("input_text", "output_text", "input_image", "input_file", "input_audio", "refusal")


def _unfit(fmt: str, block: Any) -> Unfit:
    kind = block.get("type") if isinstance(block, dict) else type(block).__name__
    return Unfit(
        "messages", f"A content part of type {str(kind)[:40]!r} cannot be sent as {fmt}; the registry does not drop it."
    )


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
            else:
                raise _unfit("bedrock-converse", part[1])
        if blocks:
            out.append({"role": "assistant" if role == "assistant" else "user", "content": blocks})
    return _merge_roles(out, "content")


def _gemini(messages: list[dict[str, Any]], names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    out = []
    names = dict(names or {})  # a tool result names its function in Gemini: found by call id
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
            else:
                raise _unfit("gemini", part[1])
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


def convert_run(fmt: str, messages: list[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    """Neutral messages inside a conversation otherwise in `fmt`'s own shape, converted
    (turns.provider_input.write); `names`: function names by call id, for Gemini's results."""
    if fmt in ("bedrock-converse", "gemini"):
        messages = [
            {"role": "user", "content": m.get("content")} if m.get("role") in ("system", "developer") else m
            for m in messages
        ]
    if fmt == "gemini":
        return _gemini(messages, names)
    return _CONVERT[fmt](messages)


def merge_roles(fmt: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role merged where the format wants the roles to alternate
    (bedrock-converse, gemini); others unchanged."""
    if fmt == "bedrock-converse":
        return _merge_roles(messages, "content")
    if fmt == "gemini":
        return _merge_roles(messages, "parts")
    return messages


# --- valid windows ------------------------------------------------------------------------------
#
# What every provider refuses in a conversation, checked on the neutral shape before a request is
# laid out, so a 200 never carries a request the provider refuses: a tool result without its
# call (an orphan, say at the start of a window cut in the middle of an exchange), a tool call
# without its result, a call or result without an id; and, for anthropic, bedrock-converse and
# gemini, a conversation that does not start with the user. OpenAI Responses lets other
# assistant items (reasoning, text, more calls) come between a call and its output; the other
# formats want the results straight after the calls.

WINDOW_HINT = (
    "Cut the conversation to a valid window: send `window` (a number of messages) with the turn call, "
    "which starts the window at a user message and never between a tool call and its result."
)
_USER_FIRST = ("anthropic", "bedrock-converse", "gemini")


def _no_result(call_id: str) -> str:
    return f"The tool call {call_id!r} has no result after it."


def _ids_problem(parts: list[Part]) -> str | None:
    for part in parts:
        if part[0] in ("call", "result") and (not isinstance(part[1], str) or not part[1]):
            return "A tool call or result without an id: a call and its result are paired by it."
    return None


def conversation_problem(fmt: str, messages: list[dict[str, Any]]) -> tuple[int, str] | None:
    """(index, what is wrong) for the first message of the neutral `messages` that `fmt`'s
    provider would refuse; None when there is none."""
    strict = fmt != "openai-responses"
    open_calls: list[str] = []
    opened_at = 0
    seen_user = False
    for j, message in enumerate(messages):
        role, parts = _parts(message)
        if role in ("system", "developer"):
            if open_calls:
                return opened_at, _no_result(open_calls[0])
            continue
        results = [p for p in parts if p[0] == "result"]
        problem = _ids_problem(parts) or (None if seen_user else _first_problem(fmt, role, bool(results)))
        if problem:
            return j, problem
        seen_user = True
        if results:
            answered = _answer(open_calls, results, parts)
            if answered is not None:  # (the orphan result, or the call left without its result)
                return (j, answered[1]) if answered[0] else (opened_at, answered[1])
            continue
        if open_calls and (strict or role == "user"):
            return opened_at, _no_result(open_calls[0])
        calls = [p[1] for p in parts if p[0] == "call"]
        if calls and not open_calls:
            opened_at = j
        open_calls += calls
    return (opened_at, _no_result(open_calls[0])) if open_calls else None


def _answer(open_calls: list[str], results: list[Part], parts: list[Part]) -> tuple[bool, str] | None:
    """Closes the open calls `results` answer (in place). What is wrong, if anything: (True,
    why) for a result without its call, (False, why) for other content in the message while
    calls are still open."""
    for part in results:
        if part[1] not in open_calls:
            return True, f"The tool result for {part[1]!r} has no tool call before it."
        open_calls.remove(part[1])
    if open_calls and any(p[0] != "result" for p in parts):
        return False, _no_result(open_calls[0])
    return None


def _first_problem(fmt: str, role: str, results: bool) -> str | None:
    """What is wrong with the conversation's first message (not system) for `fmt`, if anything."""
    if fmt in _USER_FIRST and (role != "user" or results):
        what = "a tool result" if results else f"a message of the {role}"
        return f"The conversation starts with {what}; {fmt} wants a user message first."
    return None


def append_turn(fmt: str, messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
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


# --- the second breakpoint: the end of the conversation ----------------------------------------
#
# Anthropic (and Claude on Bedrock) caches the request up to each breakpoint, at most four in a
# request; the next request reads the longest of them it still starts with, looking back about
# 20 blocks from each of its own breakpoints. The first breakpoint ends the stable prefix
# (turns.providers); this one ends the conversation, before the per-turn text, so on the next
# turn the whole history is read from the cache and only the new messages are written. The
# registry owns the markers of the conversation: those a client sends back (it echoes the
# previous request) are removed, so there are never more than four. A marker is not part of what
# the provider caches, so moving it leaves the cached bytes alone. A turn that adds many blocks
# (a dozen parallel tool calls and their results) would put the previous turn's end out of the
# lookback of this one's: up to two more breakpoints go back from the end, LOOKBACK_STEP blocks
# apart, so one of them is always within reach ("The system automatically checks for cache hits
# at all previous content block boundaries (up to approximately 20 blocks before your explicit
# breakpoint)", the prompt-caching page below).
# https://platform.claude.com/docs/en/build-with-claude/prompt-caching ("cache_control" on a
# content block; thinking blocks and empty text blocks cannot carry it);
# https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html (a `cachePoint` block
# after the content it ends, in `system`, `tools` or a message).

BREAKPOINT_LIMIT = 4  # breakpoints Anthropic and Bedrock take in one request
# The conversation's share of them: the prefix (system) holds one, the conversation the other
# three, its end and up to two more, LOOKBACK_STEP blocks apart or more, so that a turn adding up
# to about 2 * LOOKBACK_STEP + 20 blocks still has a breakpoint within Anthropic's lookback of
# about 20 blocks from the end of the previous turn (docs/rendering.md#breakpoints-within-reach).
CONVERSATION_BREAKPOINTS = 3
LOOKBACK_STEP = 16
EPHEMERAL = {"type": "ephemeral"}
CACHE_POINT = {"cachePoint": {"type": "default"}}
_ANTHROPIC_UNMARKABLE = ("thinking", "redacted_thinking")
_BEDROCK_UNMARKABLE = ("reasoningContent", "cachePoint")


def _anthropic_markable(block: Any) -> bool:
    """A block Anthropic lets carry cache_control: not a thinking block, not empty text."""
    if not isinstance(block, dict) or block.get("type") in _ANTHROPIC_UNMARKABLE:
        return False
    if block.get("type") == "text":
        return isinstance(block.get("text"), str) and bool(block["text"])
    return True


def _bedrock_markable(block: Any) -> bool:
    """A Converse block a cachePoint may follow: content, not reasoning, not a cache point."""
    if not isinstance(block, dict) or any(key in block for key in _BEDROCK_UNMARKABLE):
        return False
    return not (isinstance(block.get("text"), str) and not block["text"].strip())


def _anthropic_unmarked(message: dict[str, Any]) -> dict[str, Any]:
    """The message without cache_control anywhere in its content, nested blocks included (a
    tool_result's own content list may carry one a client echoed back)."""
    content = message.get("content")
    if not isinstance(content, list) or not any(_marked(b) for b in content):
        return message  # the very same object: nothing to take out
    return {**message, "content": [_unmarked_block(b) for b in content]}


def _marked(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    inner = block.get("content")
    return "cache_control" in block or (isinstance(inner, list) and any(_marked(b) for b in inner))


def _unmarked_block(block: Any) -> Any:
    if not _marked(block):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_unmarked_block(b) for b in out["content"]]
    return out


def _bedrock_unmarked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list) or not any(isinstance(b, dict) and "cachePoint" in b for b in content):
        return message
    return {**message, "content": [b for b in content if not (isinstance(b, dict) and "cachePoint" in b)]}


def _positions(out: list[dict[str, Any]], key: str) -> list[tuple[int, int]]:
    """Every content block of the conversation as (message, block), in order; a text content
    is one block."""
    found: list[tuple[int, int]] = []
    for m, message in enumerate(out):
        content = message.get(key)
        if isinstance(content, str):
            found.append((m, 0))
        elif isinstance(content, list):
            found += [(m, b) for b in range(len(content))]
    return found


def _breakpoint_places(blocks: list[Any], markable: Any) -> list[int]:
    """Indices (into `blocks`, the conversation's blocks in order) of the breakpoints: the last
    markable block, then up to CONVERSATION_BREAKPOINTS - 1 more, each the last markable block
    at least LOOKBACK_STEP blocks before the one after it (docs/rendering.md#breakpoints-within-reach)."""
    places: list[int] = []
    limit = len(blocks) - 1
    while len(places) < CONVERSATION_BREAKPOINTS and limit >= 0:
        found = next((i for i in range(limit, -1, -1) if markable(blocks[i])), None)
        if found is None:
            break
        places.append(found)
        limit = found - LOOKBACK_STEP
    return places


def _mark_anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [_anthropic_unmarked(m) for m in messages]
    listed: list[list[Any]] = []  # each message's content as blocks (a text content is one)
    for message in out:
        content = message.get("content")
        listed.append([{"type": "text", "text": content}] if isinstance(content, str) else list(content or []))
    positions = [(m, b) for m, blocks in enumerate(listed) for b in range(len(blocks))]
    for place in _breakpoint_places([listed[m][b] for m, b in positions], _anthropic_markable):
        m, b = positions[place]
        listed[m][b] = {**listed[m][b], "cache_control": dict(EPHEMERAL)}
        out[m] = {**out[m], "content": listed[m]}
    return out


def _mark_bedrock(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [_bedrock_unmarked(m) for m in messages]
    positions = [(m, b) for m, b in _positions(out, "content") if isinstance(out[m].get("content"), list)]
    blocks = [out[m]["content"][b] for m, b in positions]
    # from the last place back, so an inserted cache point does not move the places before it
    for place in _breakpoint_places(blocks, _bedrock_markable):
        m, b = positions[place]
        content = list(out[m]["content"])
        out[m] = {**out[m], "content": [*content[: b + 1], dict(CACHE_POINT), *content[b + 1 :]]}
    return out


def mark_conversation_end(fmt: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation (in `fmt`'s shape, before the per-turn text) with its breakpoint: for
    anthropic, `cache_control` on its last block that may carry one (a text content becomes one
    text block); for bedrock-converse, a `cachePoint` block after its last content block. The
    markers the messages held are removed first. Other formats cache on their own: unchanged."""
    if fmt == "anthropic":
        return _mark_anthropic(messages)
    if fmt == "bedrock-converse":
        return _mark_bedrock(messages)
    return messages


def _anthropic_markers(body: dict[str, Any]) -> list[tuple[str, Any]]:
    system = body.get("system")
    places: list[tuple[str, Any]] = [(f"tools[{i}]", t) for i, t in enumerate(body.get("tools") or [])]
    places += [(f"system[{i}]", b) for i, b in enumerate(system if isinstance(system, list) else [])]
    for m, message in enumerate(body.get("messages") or []):
        places += _blocks_within(f"messages[{m}]", message)
    return [(path, block) for path, block in places if isinstance(block, dict) and "cache_control" in block]


def _blocks_within(path: str, holder: Any) -> list[tuple[str, Any]]:
    """Every block of `holder`'s content list with its path, nested content lists included."""
    content = holder.get("content") if isinstance(holder, dict) else None
    found: list[tuple[str, Any]] = []
    for i, block in enumerate(content if isinstance(content, list) else []):
        found.append((f"{path}.content[{i}]", block))
        found += _blocks_within(f"{path}.content[{i}]", block)
    return found


def breakpoint_problems(fmt: str, body: dict[str, Any]) -> list[str]:
    """What in a request body breaks the provider's breakpoint rules ([] when nothing): more than
    BREAKPOINT_LIMIT; for anthropic, cache_control on an empty text block or a thinking block."""
    if fmt == "anthropic":
        marked = _anthropic_markers(body)
        problems = [f"{path}: cannot carry cache_control." for path, block in marked if not _anthropic_markable(block)]
    elif fmt == "bedrock-converse":
        blocks = [*(body.get("system") or []), *(body.get("toolConfig") or {}).get("tools", [])]
        blocks += [b for m in body.get("messages") or [] for b in m.get("content") or []]
        marked = [("cachePoint", b) for b in blocks if isinstance(b, dict) and "cachePoint" in b]
        problems = []
    else:
        return []
    if len(marked) > BREAKPOINT_LIMIT:
        problems.append(f"{len(marked)} breakpoints, more than the {BREAKPOINT_LIMIT} the provider takes.")
    return problems
