"""The vocabulary shared by the contract checks and the diff: findings, changes, the
compatibility table, JSON paths, schema walking, and the one rule that pairs a removed tool
with an added one as a rename."""

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft202012Validator

from registry import includes, skills_content, variables

LEVELS = ("patch", "minor", "major")  # ordered


@dataclass(frozen=True)
class Finding:
    path: str  # exact place inside the content document
    message: str  # one sentence a prompt engineer can act on


@dataclass(frozen=True)
class CheckResult:
    errors: list[Finding]  # block the publish
    warnings: list[Finding]  # returned and shown


@dataclass(frozen=True)
class Change:
    level: str  # "patch" | "minor" | "major"
    kind: str  # a kind of COMPATIBILITY_RULES
    path: str  # tools addressed by name
    message: str
    tool: str | None = None  # the tool concerned, if any


@dataclass(frozen=True)
class Diff:
    level: str  # the highest level among changes; "patch" when there are none
    changes: list[Change]


# (kind, level, rule): the single table the README prints. Every Change takes its level from here.
COMPATIBILITY_RULES: list[tuple[str, str, str]] = [
    ("prompt_changed", "patch", "The system prompt's wording changed."),
    ("tool_description_changed", "patch", "A tool's description changed: wording, like the prompt."),
    ("tools_reordered", "patch", "The same tools are listed in another order."),
    ("tool_added", "minor", "A new tool: every call planned against the old version stays valid."),
    ("tool_removed", "major", "A tool was removed: the agent's planned calls to it fail."),
    (
        "tool_renamed",
        "major",
        "A tool's name disappeared while a new one has the same input_schema (with at least one property) "
        "or the same non-empty description: calls to the old name fail.",
    ),
    ("parameter_added_optional", "minor", "A tool gained an optional input property."),
    ("parameter_added_required", "major", "A tool gained a required input property, at any depth."),
    ("parameter_removed", "major", "An input property was removed: calls that pass it break."),
    ("parameter_made_required", "major", "An optional input property became required."),
    ("parameter_made_optional", "minor", "A required input property became optional."),
    (
        "parameter_type_changed",
        "major",
        "An input type was narrowed or changed (number to integer, string to integer), "
        "in nested properties, array items and $ref targets too.",
    ),
    ("parameter_type_widened", "minor", "An input type now admits more (integer to number, string to [string, null])."),
    ("enum_narrowed", "major", "An input enum or const lost a value, or an enum or const was added."),
    ("enum_widened", "minor", "An input enum gained values, or an enum or const was dropped."),
    (
        "parameter_constraint_tightened",
        "major",
        "An input constraint now rejects more: a bound tightened, pattern/format added or changed, "
        "additionalProperties or items restricted, an anyOf branch removed, an allOf branch or `not` added.",
    ),
    ("parameter_constraint_loosened", "minor", "An input constraint now rejects less (the reverse of the above)."),
    (
        "input_schema_changed",
        "major",
        "Any other input_schema change the registry cannot prove compatible "
        "(if/then/else, patternProperties, an unresolvable $ref, ...).",
    ),
    (
        "input_schema_annotation_changed",
        "patch",
        "title, description, examples, default, $comment, deprecated, readOnly or writeOnly changed.",
    ),
    (
        "input_schema_rewritten",
        "patch",
        "The input_schema was rewritten to accept exactly the same calls (required reordered, a $ref inlined).",
    ),
    (
        "output_schema_added",
        "major",
        "Structured output was introduced where there was none: the consumer's parser changes.",
    ),
    ("output_schema_removed", "major", "Structured output was dropped: the consumer loses its contract."),
    ("output_property_added", "minor", "The output gained an optional property."),
    ("output_property_removed", "major", "An output property was removed: consumers reading it break."),
    (
        "output_required_added",
        "major",
        "An output property was added as required or became required: old output fails the new schema.",
    ),
    ("output_required_removed", "minor", "A required output property became optional."),
    ("output_type_changed", "major", "An output type was narrowed or changed."),
    ("output_type_widened", "minor", "An output type now admits more."),
    ("output_enum_narrowed", "major", "An output enum or const lost a value, or an enum or const was added."),
    ("output_enum_widened", "minor", "An output enum gained values, or an enum or const was dropped."),
    ("output_schema_narrowed", "major", "An output constraint now rejects more (as for inputs)."),
    ("output_schema_widened", "minor", "An output constraint now rejects less."),
    ("output_schema_changed", "major", "Any other output_schema change the registry cannot prove compatible."),
    ("output_schema_annotation_changed", "patch", "An output_schema annotation changed (as for inputs)."),
    ("output_schema_rewritten", "patch", "The output_schema was rewritten to accept exactly the same output."),
    (
        "guardrail_tightened",
        "major",
        "The default, or a tool's effective effect, moved up allow < confirm < deny: "
        "planned calls now wait for confirmation or are refused.",
    ),
    ("guardrail_loosened", "minor", "The default, or a tool's effective effect, moved down deny > confirm > allow."),
    ("guardrail_restated", "patch", "Guardrail rules or reasons changed without changing any effective effect."),
    (
        "guardrails_changed",
        "major",
        "Guardrails changed and one side is not in the documented structure, so they cannot be compared.",
    ),
    (
        "model_changed",
        "minor",
        "model.name, model.id, model.model or model.provider changed: the contract holds, behaviour may shift.",
    ),
    ("model_parameter_changed", "patch", "Another model setting (temperature, max_tokens, ...) changed."),
    ("metadata_changed", "patch", "metadata changed: neither the model nor the agent sees it."),
    *variables.COMPATIBILITY_RULES,  # variables and knowledge packs (issue 11)
    *skills_content.COMPATIBILITY_RULES,  # skill cards and the compaction policy
    *includes.COMPATIBILITY_RULES,  # snippets included in the prompt, pinned by hash
]
_LEVEL_OF = {kind: level for kind, level, _ in COMPATIBILITY_RULES}

EFFECTS = ("allow", "confirm", "deny")  # ordered, loosest first
GUARDRAIL_KEYS = ("default", "rules")
RULE_KEYS = ("tool", "effect", "reason")
NOT_TOOLS_KEY = "not_tools"  # metadata.not_tools: backticked names that are not tool references
MODEL_IDENTITY_KEYS = frozenset({"name", "id", "model", "provider"})
MAX_SCHEMA_DEPTH = 64  # JSON nesting levels: keeps every walk below Python's recursion limit

_META = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_MISSING: Any = object()


# Paths ------------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[^.\[\]\s\"']+")


def _key(path: str, key: str) -> str:
    """`path.key`, or `path["a.b"]` for a key that would read ambiguously."""
    if _BARE_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _join(path: str, parts: Iterable[str | int]) -> str:
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _key(path, part)
    return path


def _canon(value: Any) -> str:
    # Compare JSON values as JSON: in Python `True == 1 == 1.0`, in a schema they differ.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    if a is b or a is _MISSING or b is _MISSING:
        return a is b
    return _canon(a) == _canon(b)


def _show(value: Any, limit: int = 80) -> str:
    return _clip(json.dumps(value, ensure_ascii=False), limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _too_deep(value: Any, limit: int = MAX_SCHEMA_DEPTH) -> bool:
    stack = [(value, 1)]  # iterative: the value may be deeper than the recursion limit
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return False


# Schema walking ----------------------------------------------------------------------------------

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def _subschemas(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object subschema with its path, following schema keywords only (not enum values)."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for kw in _SCHEMA_MAPS:
        if isinstance(schema.get(kw), dict):
            for name, sub in schema[kw].items():
                yield from _subschemas(sub, _key(_key(path, kw), name))
    for kw in _SCHEMA_ONE:
        if isinstance(schema.get(kw), dict):
            yield from _subschemas(schema[kw], _key(path, kw))
    for kw in _SCHEMA_LISTS:
        if isinstance(schema.get(kw), list):
            for i, sub in enumerate(schema[kw]):
                yield from _subschemas(sub, f"{_key(path, kw)}[{i}]")


def _anchors(root: Any) -> dict[str, dict[str, Any]]:
    """`$anchor` name -> subschema, built once per schema rather than once per `$ref`."""
    if _too_deep(root):
        return {}
    found: dict[str, dict[str, Any]] = {}
    for _, sub in _subschemas(root):
        if isinstance(sub.get("$anchor"), str):
            found.setdefault(sub["$anchor"], sub)
    return found


def _pointer(root: Any, ref: str, anchors: dict[str, dict[str, Any]]) -> Any:
    """The target of a same-document `$ref` (JSON pointer or `$anchor`), or _MISSING."""
    if not ref.startswith("#"):
        return _MISSING
    fragment = unquote(ref[1:])
    if not fragment:
        return root
    if not fragment.startswith("/"):
        return anchors.get(fragment, _MISSING)
    node = root
    for token in fragment[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def _identifiers(schema: Any) -> set[str]:
    """Property names, $defs names and string enum/const values: ordinary backticked words."""
    names: set[str] = set()
    if _too_deep(schema):
        return names
    for _, sub in _subschemas(schema):
        for kw in ("properties", "$defs", "definitions"):
            if isinstance(sub.get(kw), dict):
                names.update(sub[kw])
        if isinstance(sub.get("enum"), list):
            names.update(v for v in sub["enum"] if isinstance(v, str))
        if isinstance(sub.get("const"), str):
            names.add(sub["const"])
    return names


def _change(kind: str, path: str, message: str, tool: str | None = None) -> Change:
    return Change(level=_LEVEL_OF[kind], kind=kind, path=path, message=message, tool=tool)


# The one rule that pairs a removed tool with an added one as a rename (check_content's stale
# mentions, diff_contents' classification and the admin's diff page all use it) -----------------


def _match_renames(removed: list[dict[str, Any]], added: list[dict[str, Any]]) -> dict[str, str]:
    """Pair removed with added tools: same input_schema first, then same description, in document order.

    A parameterless input_schema does not count as the same, nor does an empty description: two
    unrelated no-argument tools would otherwise read as a rename."""
    renamed: dict[str, str] = {}
    free = list(added)
    for same in (_same_input_schema, _same_description):
        for gone in removed:
            if gone["name"] in renamed:
                continue
            twin = next((t for t in free if same(gone, t)), None)
            if twin is not None:
                renamed[gone["name"]] = twin["name"]
                free.remove(twin)
    return renamed


def _same_input_schema(a: dict[str, Any], b: dict[str, Any]) -> bool:
    schema = a.get("input_schema")
    has_properties = isinstance(schema, dict) and isinstance(schema.get("properties"), dict) and schema["properties"]
    return bool(has_properties) and _same(schema, b.get("input_schema"))


def _same_description(a: dict[str, Any], b: dict[str, Any]) -> bool:
    da, db = a.get("description"), b.get("description")
    return isinstance(da, str) and isinstance(db, str) and bool(da.strip()) and da.strip() == db.strip()


def tool_renames(old_tools: list[dict[str, Any]], new_tools: list[dict[str, Any]]) -> dict[str, str]:
    """{old name: new name} for the tools of `new_tools` that are renames of tools of `old_tools`
    (both lists of tool objects with a string `name`)."""
    old_names, new_names = {t["name"] for t in old_tools}, {t["name"] for t in new_tools}
    removed = [t for t in old_tools if t["name"] not in new_names]
    added = [t for t in new_tools if t["name"] not in old_names]
    return _match_renames(removed, added)


# Small helpers of the document ---------------------------------------------------------------------


def _tools(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    tools = (doc or {}).get("tools")
    if not isinstance(tools, list):
        return []
    return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _is_effect(value: Any) -> bool:
    return isinstance(value, str) and value in EFFECTS


def _value(value: Any) -> str:
    return "(absent)" if value is _MISSING else _show(value, 40)
