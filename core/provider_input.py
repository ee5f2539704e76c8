"""A conversation sent in a provider's own shape, read into the neutral one (the turn call's
`messages` with `format` gemini, bedrock-converse or openai-responses).

The turn call routes and compacts the neutral shape (OpenAI Chat: `tool_calls`, `tool`
messages), and `core.provider_messages.to_messages` writes it back in the format. Reading a
conversation the registry wrote (a previous turn's `request` conversation, with the model's
answer appended) and writing it again gives the same entries, so a client may send that
conversation back turn after turn and its bytes stay the same:

- gemini: `{"role": "user" | "model", "parts": [...]}`; `text` parts, `functionCall` (the
  call's `id`, else its name, is the call id) and `functionResponse` (its `response.result`
  when that is text, else the response as JSON); other parts are kept as they are;
- bedrock-converse: `{"role", "content": [...]}`; `text`, `toolUse`, `toolResult` blocks;
  other blocks (images, cache points) are kept;
- openai-responses: input messages (`role`, `content` as text or `input_text` /
  `output_text` parts), `function_call` and `function_call_output` items; another item type
  is left for the caller's checks to refuse.

A conversation that does not look like the format is returned unchanged. Pure, standard
library only."""

import json
from typing import Any

__all__ = ["to_neutral"]


def _content(texts: list[str]) -> str | list[dict[str, Any]]:
    return texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]


def _call(call_id: str, name: str, args: Any) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args if args is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _flush(out: list[dict[str, Any]], role: str, texts: list[Any], calls: list[dict[str, Any]]) -> None:
    if not texts and not calls:
        return
    plain = [t for t in texts if isinstance(t, str)]
    if len(plain) == len(texts):
        content: Any = _content(plain) if plain else None
    else:
        content = [{"type": "text", "text": t} if isinstance(t, str) else t for t in texts]
    message: dict[str, Any] = {"role": role, "content": content}
    if calls:
        message["tool_calls"] = calls
    out.append(message)


def _gemini(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.get("role") == "model" else "user"
        texts: list[Any] = []
        calls: list[dict[str, Any]] = []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                name = str(call.get("name", ""))
                calls.append(_call(str(call.get("id") or name), name, call.get("args")))
            elif isinstance(part.get("functionResponse"), dict):
                _flush(out, role, texts, calls)
                texts, calls = [], []
                response = part["functionResponse"]
                result = (response.get("response") or {}).get("result")
                text = result if isinstance(result, str) else json.dumps(response.get("response"), sort_keys=True)
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(response.get("id") or response.get("name", "")),
                        "content": text,
                    }
                )
            else:
                texts.append(part)
        _flush(out, role, texts, calls)
    return out


def _bedrock(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.get("role") == "assistant" else "user"
        texts: list[Any] = []
        calls: list[dict[str, Any]] = []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif isinstance(block.get("toolUse"), dict):
                use = block["toolUse"]
                calls.append(_call(str(use.get("toolUseId", "")), str(use.get("name", "")), use.get("input")))
            elif isinstance(block.get("toolResult"), dict):
                _flush(out, role, texts, calls)
                texts, calls = [], []
                result = block["toolResult"]
                parts = [
                    p["text"]
                    for p in result.get("content") or []
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                ]
                out.append(
                    {"role": "tool", "tool_call_id": str(result.get("toolUseId", "")), "content": "\n".join(parts)}
                )
            else:
                texts.append(block)
        _flush(out, role, texts, calls)
    return out


def _responses(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call = _call(str(item.get("call_id", "")), str(item.get("name", "")), item.get("arguments"))
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind in (None, "message") and "role" in item:
            content = item.get("content")
            if isinstance(content, list):
                texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
                content = "\n".join(texts)
            out.append({"role": item["role"], "content": content})
        else:
            out.append(item)  # not read: the route's checks refuse it (no role)
    return out


def _looks_like(fmt: str, messages: list[dict[str, Any]]) -> bool:
    if fmt == "gemini":
        return any("parts" in m for m in messages)
    if fmt == "bedrock-converse":
        return any(
            isinstance(m.get("content"), list) and any(isinstance(b, dict) and "type" not in b for b in m["content"])
            for m in messages
        )
    if fmt == "openai-responses":
        return any(m.get("type") in ("function_call", "function_call_output", "message") for m in messages) or any(
            isinstance(m.get("content"), list)
            and any(isinstance(p, dict) and p.get("type") in ("input_text", "output_text") for p in m["content"])
            for m in messages
        )
    return False


_READERS = {"gemini": _gemini, "bedrock-converse": _bedrock, "openai-responses": _responses}


def to_neutral(fmt: str | None, messages: Any) -> Any:
    """`messages` in the neutral shape when they are in `fmt`'s own shape; otherwise (or for
    anything but a list of objects) unchanged, for the caller's checks."""
    reader = _READERS.get(fmt or "")
    if reader is None or not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return messages
    if not _looks_like(fmt or "", messages):
        return messages
    return reader(messages)
