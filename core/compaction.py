"""Tier-1 micro-compaction of old tool results: pure, deterministic, no model, no Django.

The registry's implementation is core/compaction.py (`POST /sessions/{id}/compact/`); the
Python client ships a copy, client/promptreg/compaction.py, so agents can run it in-process
(`PinnedSession.compact(messages, local=True)`) without the server depending on its own SDK.
The two files are byte-identical (tests/client/test_client_copies.py fails otherwise: edit core/ and
copy it over). Standard library only. Both are tested against `tests/fixtures/compaction_vectors.json`.

The rule, for a policy `{"keep_tool_results": K, "max_tool_result_chars": M, "placeholder": P,
"elide_step": S}`:

- A tool result is an OpenAI-shape message with role `tool` (or the legacy `function`), or one
  `tool_result` block inside an Anthropic-shape message's content list. Results are counted in
  the order they appear.
- Of R results, the first E have their content replaced by P (the message's other keys, such
  as `tool_call_id`, `tool_use_id`, `is_error`, stay as they are), where E is R - K rounded
  down to a multiple of S + 1 (0 when R <= K). With S = 0 (the default) that is every result
  but the last K. With S > 0 results are elided in steps: nothing until R passes K + S, then
  down to K at once; between K and K + S results are kept. So a conversation growing one tool
  result at a time is rewritten once every S + 1 results, not on each one (a provider's cached
  copy of it survives S results of every S + 1), at the price of up to S more results kept. E
  never decreases as results are added, so a result once elided stays the same placeholder.
- A kept result whose text is longer than M characters keeps its first characters and ends
  with `[truncated N chars]`, N being the characters removed, so that the whole text, marker
  included, is at most M characters (the marker alone when M is smaller than the marker). For
  content lists the text parts are read in order; text parts after the cut are dropped,
  non-text parts (images) are kept.
- Nothing else changes: system, user and assistant text, tool-call arguments and the order of
  messages and blocks are left alone; messages that need no change are returned as the very
  same objects, so everything before the first elided result serialises byte-identically and
  the provider's cached prefix survives.
- Compacting the output again changes nothing (idempotent): a placeholder is already a
  placeholder, and a truncated result already fits in M characters (or is the bare marker).

Characters are Python `str` characters (Unicode code points). `chars_before`/`chars_after`
count the text of every message: string contents, `text` parts and tool-result text.
"""

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_POLICY",
    "CompactionError",
    "CompactionResult",
    "Policy",
    "compact",
    "policy_errors",
    "policy_from_content",
]

DEFAULT_POLICY: dict[str, Any] = {
    "keep_tool_results": 5,
    "max_tool_result_chars": 20000,
    "placeholder": "[elided: older tool result]",
    "elide_step": 0,
}
_TOOL_ROLES = ("tool", "function")
_BARE_MARKER = re.compile(r"\[truncated \d+ chars\]")


class CompactionError(ValueError):
    """The messages are not in a shape this module understands; `path` says where."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Policy:
    keep_tool_results: int = DEFAULT_POLICY["keep_tool_results"]
    max_tool_result_chars: int = DEFAULT_POLICY["max_tool_result_chars"]
    placeholder: str = DEFAULT_POLICY["placeholder"]
    elide_step: int = DEFAULT_POLICY["elide_step"]


@dataclass(frozen=True)
class CompactionResult:
    messages: list[Any]
    elided: int  # results replaced by the placeholder by this call
    truncated: int  # kept results cut by this call
    chars_before: int
    chars_after: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "elided": self.elided,
            "truncated": self.truncated,
            "chars_before": self.chars_before,
            "chars_after": self.chars_after,
        }


def policy_errors(value: Any, path: str = "compaction") -> list[tuple[str, str]]:
    """What is wrong with a `compaction` policy from a content document: [(path, message)]."""
    if not isinstance(value, dict):
        return [(path, "Must be an object with keep_tool_results, max_tool_result_chars, placeholder, elide_step.")]
    errors = [
        (f"{path}.{key}", f"Unknown field; allowed fields are {', '.join(sorted(DEFAULT_POLICY))}.")
        for key in sorted(set(value) - set(DEFAULT_POLICY))
    ]
    for key in ("keep_tool_results", "max_tool_result_chars", "elide_step"):
        if key in value:
            number = value[key]
            # bool is an int in Python; `true` is not a count.
            if not isinstance(number, int) or isinstance(number, bool):
                errors.append((f"{path}.{key}", "Must be an integer."))
            elif number < 0:
                errors.append((f"{path}.{key}", "Must not be negative."))
    if "placeholder" in value and not isinstance(value["placeholder"], str):
        errors.append((f"{path}.placeholder", "Must be a string."))
    return errors


def policy_from_content(content: dict[str, Any]) -> Policy:
    """The policy of a (valid) content document, with the defaults for what it leaves out."""
    given = content.get("compaction") or {}
    return Policy(**{**DEFAULT_POLICY, **given})


def _marker(removed: int) -> str:
    return f"[truncated {removed} chars]"


def _cut(total: int, limit: int) -> tuple[int, str]:
    """How many leading characters of a `total`-character text to keep, and the text to append,
    so that kept + appended <= limit and the marker states exactly the characters removed."""
    keep = limit
    while keep > 0:
        tail = "\n" + _marker(total - keep)
        if keep + len(tail) <= limit:
            return keep, tail
        keep -= max(1, keep + len(tail) - limit)
    return 0, _marker(total)


def _parts_text(parts: list[Any], path: str) -> int:
    total = 0
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise CompactionError(f"{path}[{i}]", "A content part must be an object.")
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise CompactionError(f"{path}[{i}].text", "Must be a string.")
            total += len(text)
    return total


def _content_chars(content: Any, path: str) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return _parts_text(content, path)
    raise CompactionError(path, "A tool result's content must be a string, a list of parts or null.")


def _truncate(content: Any, limit: int) -> Any | None:
    """The truncated content, or None when it needs no cut."""
    if isinstance(content, str):
        if len(content) <= limit or _BARE_MARKER.fullmatch(content):
            return None
        keep, tail = _cut(len(content), limit)
        return content[:keep] + tail
    if not isinstance(content, list):
        return None
    texts = [p["text"] for p in content if p.get("type") == "text"]
    total = sum(len(t) for t in texts)
    if total <= limit or _BARE_MARKER.fullmatch("".join(texts)):
        return None
    keep, tail = _cut(total, limit)
    out: list[Any] = []
    used = 0
    marked = False
    for part in content:
        if part.get("type") != "text":
            out.append(part)
            continue
        if marked:
            continue  # text after the cut is removed; its characters are in the marker's count
        text = part["text"]
        if used + len(text) < keep:
            out.append(part)
            used += len(text)
            continue
        piece = text[: keep - used]
        out.append({**part, "text": piece + tail})
        used = keep
        marked = True
    return out


def _message_chars(message: dict[str, Any], path: str) -> int:
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        return 0
    total = 0
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            total += len(block["text"])
        elif kind == "tool_result":
            total += _content_chars(block.get("content"), f"{path}.content[{i}].content")
    return total


def compact(messages: Any, policy: Policy | None = None) -> CompactionResult:
    """Compact `messages` (a list in the OpenAI or Anthropic chat shape) under `policy`
    (the defaults when None). Raises CompactionError for a shape it cannot read."""
    policy = policy or Policy()
    if not isinstance(messages, list):
        raise CompactionError("messages", "Must be a list of messages.")
    # Every tool result as (message index, block index or None), in order of appearance.
    results: list[tuple[int, int | None]] = []
    chars_before = 0
    for m, message in enumerate(messages):
        path = f"messages[{m}]"
        if not isinstance(message, dict):
            raise CompactionError(path, "Each message must be an object.")
        if not isinstance(message.get("role"), str):
            raise CompactionError(f"{path}.role", "Must be a string.")
        if message["role"] in _TOOL_ROLES:
            _content_chars(message.get("content"), f"{path}.content")
            results.append((m, None))
        elif isinstance(message.get("content"), list):
            for index, block in enumerate(message["content"]):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append((m, index))
        chars_before += _message_chars(message, path)

    # Elided: the first `keep_from` results (module docstring); a multiple of elide_step + 1.
    over = max(0, len(results) - policy.keep_tool_results)
    keep_from = over - over % (policy.elide_step + 1)
    out = list(messages)
    # Replacement blocks per Anthropic message, applied once per message below.
    blocks: dict[int, list[Any]] = {}
    elided = truncated = 0
    for n, (m, b) in enumerate(results):
        source = messages[m] if b is None else messages[m]["content"][b]
        content = source.get("content")
        if n < keep_from:
            if content == policy.placeholder:
                continue
            new_content: Any = policy.placeholder
            elided += 1
        else:
            cut = _truncate(content, policy.max_tool_result_chars)
            if cut is None:
                continue
            new_content = cut
            truncated += 1
        if b is None:
            out[m] = {**messages[m], "content": new_content}
        else:
            blocks.setdefault(m, list(messages[m]["content"]))[b] = {**source, "content": new_content}
    for m, content_list in blocks.items():
        out[m] = {**messages[m], "content": content_list}
    chars_after = sum(_message_chars(message, f"messages[{m}]") for m, message in enumerate(out))
    return CompactionResult(out, elided, truncated, chars_before, chars_after)
