"""What changed between two content documents, for people: the prompt side by side with
changed words marked, the tools added / removed / changed (and in which fields), and the
other JSON fields line by line. Pure functions of two dicts; the views render the result."""

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from registry.canonical import CONTENT_FIELDS
from registry.contracts import tool_renames

# Words and the whitespace/punctuation between them, so a changed word is marked whole.
_TOKEN_RE = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class Row:
    """One line of a side-by-side diff. `kind` is equal, insert, delete or replace; a side
    with no line (an inserted line has no left side) has number None."""

    kind: str
    left_no: int | None
    left: SafeString
    right_no: int | None
    right: SafeString


# Changed whitespace is drawn, so that a line that differs only in it does not look equal:
# a space as a middle dot, a tab as an arrow, a line ending as the control pictures of its CR and LF.
_VISIBLE = str.maketrans({" ": "\u00b7", "\t": "\u2192", "\r": "\u240d", "\n": "\u240a", "\u00a0": "\u237d"})


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _shown(text: str) -> SafeString:
    """Unchanged text of a line, without its line ending (the row is the line)."""
    return escape(text.replace("\r", "").replace("\n", ""))


def _mark(tokens: list[str], tag: str) -> str:
    return "".join(
        f'<span class="{tag}">{escape(t)}</span>'
        if t.strip()
        else f'<span class="{tag} ws">{escape(t.translate(_VISIBLE))}</span>'
        for t in tokens
    )


def _words(old: str, new: str) -> tuple[SafeString, SafeString]:
    """Both lines (with their line endings) as HTML with the words that differ wrapped in
    <del>/<ins>-like spans, and whitespace that differs drawn visibly."""
    a, b = _TOKEN_RE.findall(old), _TOKEN_RE.findall(new)
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            left.append(_shown("".join(a[i1:i2])))
            right.append(_shown("".join(b[j1:j2])))
        else:
            left.append(_mark(a[i1:i2], "word-del"))
            right.append(_mark(b[j1:j2], "word-ins"))
    return mark_safe("".join(left)), mark_safe("".join(right))


def _lines(text: str) -> list[str]:
    # A final line without an ending is compared as if it had LF: a line added at the end does
    # not mark the line before it as changed (whitespace_only tells of that last newline).
    lines = text.splitlines(keepends=True)
    if lines and not _ending(lines[-1]):
        lines[-1] += "\n"
    return lines


def side_by_side(old: str, new: str) -> list[Row]:
    """Line-level diff of two texts; lines replaced one for one get word-level marks. Lines are
    compared with their endings, so a line whose only change is CR LF for LF (or a trailing
    space) is a replaced line with that whitespace drawn, not an equal one."""
    a, b = _lines(old), _lines(new)
    rows: list[Row] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            for k in range(i2 - i1):
                text = _shown(a[i1 + k])
                rows.append(Row("equal", i1 + k + 1, text, j1 + k + 1, text))
        elif op == "delete":
            for k in range(i1, i2):
                rows.append(Row("delete", k + 1, _shown(a[k]), None, mark_safe("")))
        elif op == "insert":
            for k in range(j1, j2):
                rows.append(Row("insert", None, mark_safe(""), k + 1, _shown(b[k])))
        else:  # replace: pair lines up; the longer side's rest is deleted or inserted
            for k in range(max(i2 - i1, j2 - j1)):
                li, rj = i1 + k, j1 + k
                if li < i2 and rj < j2:
                    left, right = _words(a[li], b[rj])
                    rows.append(Row("replace", li + 1, left, rj + 1, right))
                elif li < i2:
                    rows.append(Row("delete", li + 1, _shown(a[li]), None, mark_safe("")))
                else:
                    rows.append(Row("insert", None, mark_safe(""), rj + 1, _shown(b[rj])))
    return rows


def whitespace_only(old: Any, new: Any) -> bool:
    """Whether two JSON values differ, but only in whitespace inside their strings (line
    endings, spaces, tabs): what the diff then says in words."""
    return old != new and _squeezed(old) == _squeezed(new)


def _squeezed(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_squeezed(v) for v in value]
    if isinstance(value, dict):
        return {k: _squeezed(v) for k, v in value.items()}
    return value


def _paths(old: Any, new: Any, prefix: str) -> list[str]:
    """The JSON paths at which two values differ, as deep as both sides are objects."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            where = f"{prefix}.{key}" if prefix else key
            if key not in old or key not in new:
                out.append(where)
            elif old[key] != new[key]:
                out.extend(_paths(old[key], new[key], where))
        return out
    return [prefix] if old != new else []


@dataclass(frozen=True)
class ToolChange:
    name: str
    kind: str  # added, removed, changed
    fields: list[str] = field(default_factory=list)  # for changed: e.g. description, input_schema.properties.amount
    note: str = ""


def _tools_by_name(tools: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(tools, list):
        return {}
    return {t["name"]: t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _body(tool: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tool.items() if k != "name"}


def tool_changes(old_tools: Any, new_tools: Any) -> list[ToolChange]:
    """Tools matched by name: which were added, removed, or changed and in which fields.
    A removed and an added tool that registry.contracts pairs as a rename (its one rule, the
    same the version's classification uses) are noted as a likely rename, which still breaks
    callers of the old name."""
    old, new = _tools_by_name(old_tools), _tools_by_name(new_tools)
    removed = [n for n in old if n not in new]
    added = [n for n in new if n not in old]
    renamed_to = tool_renames(list(old.values()), list(new.values()))
    renamed_from = {v: k for k, v in renamed_to.items()}
    changes: list[ToolChange] = []
    for name in removed:
        note = f"probably renamed to {renamed_to[name]}" if name in renamed_to else ""
        changes.append(ToolChange(name, "removed", note=note))
    for name in added:
        note = f"probably renamed from {renamed_from[name]}" if name in renamed_from else ""
        changes.append(ToolChange(name, "added", note=note))
    for name in old:
        if name in new and old[name] != new[name]:
            changes.append(ToolChange(name, "changed", _paths(_body(old[name]), _body(new[name]), "")))
    return changes


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


# Every content field but the prompt and the tools (shown above them), from the content schema:
# a field added later shows up in the diff instead of changing unseen.
_SHOWN_FIRST = ("guardrails", "output_schema", "model", "metadata", "variables", "knowledge")
OTHER_FIELDS = (*_SHOWN_FIRST, *sorted(CONTENT_FIELDS - {"system_prompt", "tools", *_SHOWN_FIRST}))


@dataclass(frozen=True)
class ContentDiff:
    prompt_rows: list[Row]
    prompt_changed: bool
    tools: list[ToolChange]
    tools_rows: list[Row]
    fields: dict[str, list[Row]]  # only the other fields that changed
    same: bool
    whitespace_only: bool = False  # they differ, but only in whitespace (line endings, spaces)


def content_diff(old: dict[str, Any], new: dict[str, Any]) -> ContentDiff:
    prompt_old, prompt_new = old.get("system_prompt") or "", new.get("system_prompt") or ""
    tools_old, tools_new = old.get("tools", []), new.get("tools", [])
    fields = {
        name: side_by_side(pretty(old.get(name)), pretty(new.get(name)))
        for name in OTHER_FIELDS
        if old.get(name) != new.get(name)
    }
    return ContentDiff(
        prompt_rows=side_by_side(prompt_old, prompt_new),
        prompt_changed=prompt_old != prompt_new,
        tools=tool_changes(tools_old, tools_new),
        tools_rows=side_by_side(pretty(tools_old), pretty(tools_new)) if tools_old != tools_new else [],
        fields=fields,
        same=old == new,
        whitespace_only=whitespace_only(old, new),
    )
