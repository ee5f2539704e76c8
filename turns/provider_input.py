"""A conversation sent in a provider's own shape, read for the turn call and written back in
that same shape (docs/api.md#conversations-in-a-formats-own-shape).

The turn call routes, compacts and checks the neutral shape (OpenAI Chat: `tool_calls`,
`tool` messages). `read` turns a conversation into that shape item by item and remembers where
each neutral message came from; `write` lays the compacted conversation out in the format
again. An item already in the format's own shape (`Read.native`) is written back as the very
item the client sent, so its bytes survive (reasoning items with `encrypted_content`, images,
files, thought signatures, ids); only a tool result the compaction changed is rewritten, in
place. An item in the neutral shape inside such a list (the answer's `messages` of an earlier
turn, say) is converted. An item that fits neither is refused with `Unfit`, naming it: the
registry never drops what it cannot carry.

- gemini: `{"role": "user" | "model", "parts": [...]}`; a `functionCall` (its `id`, else
  its name, is the call id) and a `functionResponse` (its `response.result` when that is text,
  else the response as JSON) are read; other parts (`inlineData`, `fileData`, thoughts and
  their signatures) are carried as they are;
- bedrock-converse: `{"role", "content": [...]}` of Converse blocks (no `type` key); `toolUse`
  and `toolResult` are read; other blocks (images, documents, reasoning, cache points) are
  carried;
- openai-responses: input messages (`role`, text or a list of `input_text`, `output_text`,
  `input_image`, `input_file`, `refusal` parts), `function_call`, `function_call_output` and
  `reasoning` items (carried whole, `encrypted_content` included).

Other formats (anthropic, openai-chat) are read as they are: the neutral shape holds their
messages. Pure, standard library only."""

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["NATIVE_FORMATS", "Read", "Unfit", "is_window_start", "read", "window", "write"]

NATIVE_FORMATS = ("gemini", "bedrock-converse", "openai-responses")
_ROLES = ("user", "assistant", "system", "developer", "tool", "function")
_RESPONSES_PARTS = ("input_text", "output_text", "input_image", "input_file", "input_audio", "refusal")
# Items of the Responses API carried as they are (they hold no text the registry reads).
_RESPONSES_CARRIED = ("reasoning",)
_GEMINI_PART_KEYS = (
    "text",
    "functionCall",
    "functionResponse",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
    "thought",
    "thoughtSignature",
    "videoMetadata",
)
_BEDROCK_BLOCK_KEYS = (
    "text",
    "image",
    "document",
    "video",
    "toolUse",
    "toolResult",
    "guardContent",
    "cachePoint",
    "reasoningContent",
    "citationsContent",
    "searchResult",
)


class Unfit(ValueError):
    """An item of the conversation fits neither the format's shape nor the neutral one."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Read:
    """A conversation as read for `fmt`.

    items: the messages as sent; native[i]: item i is in the format's own shape (written back
    as it is). neutral: the conversation in the neutral shape; origins[j] = (i, part): neutral
    message j comes from item i, and when it is a tool result read out of a native item, from
    its part (block) `part` (None for the whole item)."""

    fmt: str | None
    items: list[dict[str, Any]]
    native: list[bool]
    neutral: list[dict[str, Any]]
    origins: list[tuple[int, int | None]]

    def item_of(self, j: int) -> int:
        """The index in `items` of neutral message j."""
        return self.origins[j][0]


def _text(texts: list[str]) -> str:
    return "\n".join(texts)


def _call(call_id: str, name: str, args: Any) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args if args is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _is_neutral(item: dict[str, Any]) -> bool:
    """A message of the neutral shape (or an Anthropic-blocks message): a role and text or a
    list of typed parts."""
    if item.get("role") not in _ROLES or "type" in item or "parts" in item:
        return False
    content = item.get("content")
    if isinstance(content, list):
        return all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)
    return content is None or isinstance(content, str)


# --- reading, per format ---------------------------------------------------------------------------


class _Reader:
    def __init__(self) -> None:
        self.neutral: list[dict[str, Any]] = []
        self.origins: list[tuple[int, int | None]] = []

    def add(self, message: dict[str, Any], i: int, part: int | None = None) -> None:
        self.neutral.append(message)
        self.origins.append((i, part))


def _nonempty_id(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise Unfit(path, "Must be a non-empty string: a tool call and its result are paired by it.")
    return value


def _read_gemini(reader: _Reader, i: int, item: dict[str, Any]) -> None:
    role = item.get("role", "user")
    if role not in ("user", "model"):
        raise Unfit(f"messages[{i}].role", "A Gemini content's role is user or model.")
    parts = item.get("parts")
    if not isinstance(parts, list) or not parts:
        raise Unfit(f"messages[{i}].parts", "Must be a non-empty list of parts.")
    neutral_role = "assistant" if role == "model" else "user"
    texts: list[str] = []
    calls: list[dict[str, Any]] = []

    def flush() -> None:
        if texts or calls:
            message: dict[str, Any] = {"role": neutral_role, "content": _text(texts) if texts else None}
            if calls:
                message["tool_calls"] = list(calls)
            reader.add(message, i)
            texts.clear()
            calls.clear()

    for k, part in enumerate(parts):
        path = f"messages[{i}].parts[{k}]"
        if not isinstance(part, dict) or not any(key in part for key in _GEMINI_PART_KEYS):
            raise Unfit(path, f"Not a Gemini part (one of {', '.join(_GEMINI_PART_KEYS)}).")
        if isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            name = _nonempty_id(call.get("name"), f"{path}.functionCall.name")
            calls.append(_call(str(call.get("id") or name), name, call.get("args")))
        elif isinstance(part.get("functionResponse"), dict):
            flush()
            response = part["functionResponse"]
            name = _nonempty_id(response.get("name"), f"{path}.functionResponse.name")
            payload = response.get("response")
            result = payload.get("result") if isinstance(payload, dict) else None
            text = result if isinstance(result, str) else json.dumps(payload, sort_keys=True)
            reader.add({"role": "tool", "tool_call_id": str(response.get("id") or name), "content": text}, i, k)
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        # other parts (inline data, files, thoughts) are carried by the item itself
    flush()
    if not reader.origins or reader.origins[-1][0] != i:  # an item of thoughts or data only
        reader.add({"role": neutral_role, "content": ""}, i)


def _read_bedrock(reader: _Reader, i: int, item: dict[str, Any]) -> None:
    role = item.get("role")
    if role not in ("user", "assistant"):
        raise Unfit(f"messages[{i}].role", "A Converse message's role is user or assistant.")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []

    def flush() -> None:
        if texts or calls:
            message: dict[str, Any] = {"role": role, "content": _text(texts) if texts else None}
            if calls:
                message["tool_calls"] = list(calls)
            reader.add(message, i)
            texts.clear()
            calls.clear()

    for k, block in enumerate(item["content"]):
        path = f"messages[{i}].content[{k}]"
        if isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            call_id = _nonempty_id(use.get("toolUseId"), f"{path}.toolUse.toolUseId")
            calls.append(_call(call_id, str(use.get("name", "")), use.get("input")))
        elif isinstance(block.get("toolResult"), dict):
            flush()
            result = block["toolResult"]
            call_id = _nonempty_id(result.get("toolUseId"), f"{path}.toolResult.toolUseId")
            parts = [
                p["text"] for p in result.get("content") or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
            ]
            reader.add({"role": "tool", "tool_call_id": call_id, "content": "\n".join(parts)}, i, k)
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
    flush()
    if not reader.origins or reader.origins[-1][0] != i:
        reader.add({"role": role, "content": ""}, i)


def _bedrock_native(item: dict[str, Any]) -> bool:
    content = item.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(b, dict) and "type" not in b and any(key in b for key in _BEDROCK_BLOCK_KEYS) for b in content
        )
    )


def _read_responses(reader: _Reader, i: int, item: dict[str, Any]) -> bool:
    """Reads a Responses item; False when it is not one (a neutral message, for the caller)."""
    kind = item.get("type")
    path = f"messages[{i}]"
    if kind == "function_call":
        call_id = _nonempty_id(item.get("call_id"), f"{path}.call_id")
        name = _nonempty_id(item.get("name"), f"{path}.name")
        reader.add(
            {"role": "assistant", "content": None, "tool_calls": [_call(call_id, name, item.get("arguments"))]}, i
        )
        return True
    if kind == "function_call_output":
        call_id = _nonempty_id(item.get("call_id"), f"{path}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        reader.add({"role": "tool", "tool_call_id": call_id, "content": text}, i)
        return True
    if kind in _RESPONSES_CARRIED:
        reader.add({"role": "assistant", "content": ""}, i)
        return True
    if kind not in (None, "message"):
        raise Unfit(
            f"{path}.type",
            f"An item of type {str(kind)[:40]!r} is not one the registry carries (message, function_call, "
            "function_call_output, reasoning).",
        )
    return _read_responses_message(reader, i, item)


def _read_responses_message(reader: _Reader, i: int, item: dict[str, Any]) -> bool:
    """A Responses input message (`type` message or absent); False for a neutral message."""
    kind = item.get("type")
    path = f"messages[{i}]"
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        if kind is None:
            return False  # a tool message of the neutral shape, say
        raise Unfit(f"{path}.role", "A Responses message's role is user, assistant, system or developer.")
    content = item.get("content")
    if isinstance(content, str) and not item.get("tool_calls"):
        reader.add({"role": role, "content": content}, i)
        return True
    if isinstance(content, list) and content:
        kinds = [p.get("type") if isinstance(p, dict) else None for p in content]
        if all(k in _RESPONSES_PARTS for k in kinds):
            texts = [p["text"] for p in content if isinstance(p.get("text"), str)]
            reader.add({"role": role, "content": _text(texts)}, i)
            return True
        if kind == "message" or any(k in _RESPONSES_PARTS for k in kinds):
            bad = next(k for k, part_kind in enumerate(kinds) if part_kind not in _RESPONSES_PARTS)
            raise Unfit(
                f"{path}.content[{bad}]",
                f"Not a Responses content part (one of {', '.join(_RESPONSES_PARTS)}).",
            )
    if kind == "message":
        raise Unfit(f"{path}.content", "A Responses message's content is text or a list of content parts.")
    return False


def read(fmt: str | None, messages: list[dict[str, Any]]) -> Read:
    """`messages` (a list of objects) read for `fmt`. Raises Unfit naming the first item (or
    part) that is in neither the format's shape nor the neutral one, or a tool call or result
    of the format's shape without a non-empty id."""
    if fmt not in NATIVE_FORMATS:
        return Read(fmt, messages, [False] * len(messages), messages, [(i, None) for i in range(len(messages))])
    reader = _Reader()
    native: list[bool] = []
    for i, item in enumerate(messages):
        if fmt == "openai-responses":
            if _read_responses(reader, i, item):
                native.append(True)
                continue
        elif fmt == "gemini" and "parts" in item:
            _read_gemini(reader, i, item)
            native.append(True)
            continue
        elif fmt == "bedrock-converse" and _bedrock_native(item):
            _read_bedrock(reader, i, item)
            native.append(True)
            continue
        if not _is_neutral(item):
            raise Unfit(f"messages[{i}]", f"Neither a {fmt} item nor a chat message (role and content).")
        if item["role"] in ("tool", "function"):
            _nonempty_id(item.get("tool_call_id") or item.get("name"), f"messages[{i}].tool_call_id")
        for c, call in enumerate(item.get("tool_calls") or []):
            _nonempty_id(call.get("id") if isinstance(call, dict) else None, f"messages[{i}].tool_calls[{c}].id")
        reader.add(item, i)
        native.append(False)
    return Read(fmt, messages, native, reader.neutral, reader.origins)


# --- windows -------------------------------------------------------------------------------------------


def is_window_start(item: Any) -> bool:
    """A message a conversation may start at: the user's, holding no tool result, in any of the
    shapes read here (so no tool call is ever cut from its result)."""
    if not isinstance(item, dict) or item.get("role") != "user" or item.get("type") not in (None, "message"):
        return False
    blocks = item.get("parts") if isinstance(item.get("parts"), list) else item.get("content")
    if isinstance(blocks, list):
        for block in blocks:
            if isinstance(block, dict) and (
                block.get("type") == "tool_result" or "toolResult" in block or "functionResponse" in block
            ):
                return False
    return True


def window(messages: list[Any], size: int) -> list[Any] | None:
    """The longest tail of `messages` of at most `size` entries that starts at a user message
    holding no tool result (`is_window_start`); None when there is none."""
    start = max(0, len(messages) - size)
    for i in range(start, len(messages)):
        if is_window_start(messages[i]):
            return messages[i:]
    return None


# --- writing back -------------------------------------------------------------------------------------


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _rewritten(fmt: str, item: dict[str, Any], part: int | None, content: Any) -> dict[str, Any]:
    """`item` with its tool result (the whole item, or its part `part`) holding `content`, the
    compaction's text for it."""
    text = _result_text(content)
    if fmt == "openai-responses":
        return {**item, "output": text}
    if fmt == "gemini" and part is not None:
        parts = list(item["parts"])
        response = parts[part]["functionResponse"]
        parts[part] = {**parts[part], "functionResponse": {**response, "response": {"result": text}}}
        return {**item, "parts": parts}
    if fmt == "bedrock-converse" and part is not None:
        blocks = list(item["content"])
        result = blocks[part]["toolResult"]
        blocks[part] = {**blocks[part], "toolResult": {**result, "content": [{"text": text or " "}]}}
        return {**item, "content": blocks}
    return item


def write(conversation: Read, compacted: list[dict[str, Any]], convert: Any) -> list[dict[str, Any]]:
    """The compacted conversation in the format's shape. Native items are the items sent (a
    tool result the compaction changed rewritten in place); runs of neutral messages are
    converted by `convert(fmt, messages, names)` (turns.provider_messages.convert_run), `names`
    mapping call ids to function names for the results in such a run."""
    fmt = conversation.fmt or ""
    by_item: dict[int, list[int]] = {}
    for j, (i, _part) in enumerate(conversation.origins):
        by_item.setdefault(i, []).append(j)
    names: dict[str, str] = {}
    for message in conversation.neutral:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name", ""))
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for i, item in enumerate(conversation.items):
        indices = by_item.get(i, [])
        if not conversation.native[i]:
            pending += [compacted[j] for j in indices]
            continue
        if pending:
            out += convert(fmt, pending, names)
            pending = []
        for j in indices:
            if compacted[j] is not conversation.neutral[j]:  # the compaction changed this result
                item = _rewritten(fmt, item, conversation.origins[j][1], compacted[j].get("content"))
        out.append(item)
    if pending:
        out += convert(fmt, pending, names)
    return out
