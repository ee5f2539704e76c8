"""Publish-time contract checks and breaking-change classification for bundle content.

Two pure functions over normalised content documents (`registry.canonical.normalise_content`):

- `check_content(doc, previous)`: what is wrong with a document (errors, which block a publish)
  and what looks wrong against the bundle's previous version (warnings, returned and shown).
- `diff_contents(old, new)`: every change from `old` to `new`, each classified `patch`, `minor`
  or `major` by `COMPATIBILITY_RULES`, the one table the README prints.

Finding paths point into the content document with list indexes (`tools[2].input_schema.
properties.amount.type`, `guardrails.rules[1].effect`); change paths address tools by name
(`tools[process_refund].input_schema.properties.amount.type`), because indexes shift between
versions. A key that contains `.`, `[`, `]`, quotes or whitespace is written `["a.b"]`.

How a system prompt references tools
    - Explicitly, `{{tool:NAME}}` (whitespace inside the braces allowed), anywhere in the prompt.
      NAME must be a tool of the bundle: anything else is an error.
    - Implicitly, an inline code span (single backticks) whose whole text is an identifier,
      optionally written as a call (`issue_refund`, `issue_refund(order_id)`), when the
      identifier looks like a tool: it has an underscore between two letters or digits
      (snake_case), or it is a camelCase call (`issueRefund()`), or it names a tool of the
      previous version. It is not a reference when it is in capitals (`ORDER_ID`, a constant),
      a property name, `$defs` name or string enum/const value in any schema of the bundle
      (`order_id`, `in_progress`), or listed in `metadata.not_tools` (a list of strings, the
      allow-list for ordinary code such as `snake_case`). Fenced code blocks are skipped.
      A reference to a tool the bundle lacks is an error.
    - A prompt that still mentions, anywhere and in any form, a tool the previous version had
      and this one removed or renamed gets a warning (unless that mention is already an error).

Guardrails structure (`{}` means no guardrails: every tool is allowed)
    {"default": "allow" | "confirm" | "deny",            optional, "allow" when absent
     "rules": [{"tool": NAME, "effect": "allow" | "confirm" | "deny", "reason": str?}]}
    One rule per tool, naming only tools of the bundle; unknown keys are errors. A tool's
    effective effect is its rule's effect, else the default; effects order allow < confirm < deny.

Compatibility model
    Like a schema registry's BACKWARD mode: a version is compatible when everything valid under
    the old one stays valid under the new one. For a tool's input_schema that is the agent's
    point of view (a call planned against the old version must still be accepted); for the
    output_schema, output valid under the old schema must still validate, and every property a
    consumer reads must still be there. Anything the comparison cannot prove compatible is
    major. `$ref`s into the same schema (`#/$defs/...`, any JSON pointer, `$anchor`) are
    followed, with sibling keywords laid over the target, so a change shows where the target is
    used (once, at its first place of use, when several places share it); other `$ref`s are
    compared as text. `oneOf` is judged like `anyOf`. A guardrail default that moves is judged
    on its own, even if every tool has a rule. Comparison work is capped (see _WORK_LIMIT):
    a schema too large or too self-referential to compare in full is reported as major.
"""

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from registry import variables
from registry.canonical import TOOL_NAME_RE
from skills.content import content_warnings as skills_content_warnings

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


# check_content -------------------------------------------------------------------------------------


def check_content(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> CheckResult:
    """doc and previous are NORMALISED content documents (registry.canonical.normalise_content output:
    all six top-level keys present, types already checked). previous is the bundle's latest version's
    content, or None."""
    errors: list[Finding] = []
    warnings: list[Finding] = []
    tools = _tools(doc)
    not_tools, metadata_errors = _not_tools(doc.get("metadata"))
    _check_prompt(doc, previous, not_tools, errors, warnings)
    _check_tools(tools, errors, warnings)
    if doc.get("output_schema") is not None:
        _check_schema(doc["output_schema"], "output_schema", errors, warnings)
    _check_guardrails(doc.get("guardrails"), {t["name"] for t in tools}, errors)
    errors.extend(metadata_errors)
    warnings.extend(Finding(path, message) for path, message in skills_content_warnings(doc))
    found_errors, found_warnings = variables.check(doc)  # variables and knowledge packs (issue 11)
    errors.extend(Finding(path, message) for path, message in found_errors)
    warnings.extend(Finding(path, message) for path, message in found_warnings)
    return CheckResult(errors=errors, warnings=warnings)


def _tools(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    tools = (doc or {}).get("tools")
    if not isinstance(tools, list):
        return []
    return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _not_tools(metadata: Any) -> tuple[set[str], list[Finding]]:
    if not isinstance(metadata, dict) or NOT_TOOLS_KEY not in metadata:
        return set(), []
    value, path = metadata[NOT_TOOLS_KEY], f"metadata.{NOT_TOOLS_KEY}"
    if not isinstance(value, list):
        return set(), [Finding(path, "Must be a list of names the prompt uses that are not tools.")]
    bad = [Finding(f"{path}[{i}]", "Must be a string.") for i, v in enumerate(value) if not isinstance(v, str)]
    return {v for v in value if isinstance(v, str)}, bad


def _check_tools(tools: list[dict[str, Any]], errors: list[Finding], warnings: list[Finding]) -> None:
    first_index: dict[str, int] = {}
    for i, tool in enumerate(tools):
        name = tool["name"]
        if name in first_index:
            errors.append(
                Finding(
                    f"tools[{i}].name",
                    f"Another tool is already named `{name}` (tools[{first_index[name]}]); tool names must be unique.",
                )
            )
        first_index.setdefault(name, i)
        path = f"tools[{i}].input_schema"
        _check_schema(tool.get("input_schema"), path, errors, warnings)
        schema = tool.get("input_schema")
        if isinstance(schema, dict) and schema.get("type") != "object":
            warnings.append(
                Finding(
                    _key(path, "type"),
                    f'Declare `"type": "object"` at the top of `{name}`\'s input_schema: '
                    "models send tool arguments as a JSON object.",
                )
            )


def _check_schema(schema: Any, path: str, errors: list[Finding], warnings: list[Finding]) -> None:
    if not isinstance(schema, dict):
        errors.append(Finding(path, "Must be a JSON Schema object."))
        return
    if _too_deep(schema):
        errors.append(
            Finding(path, f"The schema nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it with `$defs`.")
        )
        return
    errors.extend(Finding(_join(path, where), message) for where, message in _metaschema_errors(schema))
    _check_refs(schema, path, errors, warnings)
    dialect = schema.get("$schema")
    if isinstance(dialect, str) and dialect.rstrip("#") != _DIALECT:
        warnings.append(
            Finding(
                _key(path, "$schema"),
                f"The schema declares {dialect}, but the registry checks and compares it as Draft 2020-12 "
                f"({_DIALECT}); declare that or drop `$schema`.",
            )
        )


# Metaschema validation costs about 10 ms per KiB of schema, and most publishes repeat the previous
# version's tool schemas: remember results by content. Clearing when full keeps the bound simple.
_META_CACHE: dict[str, tuple[tuple[tuple[str | int, ...], str], ...]] = {}
_META_CACHE_SIZE = 512


def _metaschema_errors(schema: dict[str, Any]) -> tuple[tuple[tuple[str | int, ...], str], ...]:
    """(path inside the schema, message) for every Draft 2020-12 metaschema error, in path order."""
    digest = hashlib.sha256(_canon(schema).encode("utf-8", "surrogatepass")).hexdigest()
    cached = _META_CACHE.get(digest)
    if cached is None:
        found: dict[tuple[str, str], tuple[tuple[str | int, ...], str]] = {}
        for error in sorted(_META.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path]):
            where, message = tuple(error.absolute_path), _schema_error_message(error)
            # The 2020-12 metaschema reaches some keywords by several routes: report each once.
            found.setdefault((_canon(where), message), (where, message))
        cached = tuple(found.values())
        if len(_META_CACHE) >= _META_CACHE_SIZE:
            _META_CACHE.clear()
        _META_CACHE[digest] = cached
    return cached


_TYPE_NAMES = "array, boolean, integer, null, number, object or string"
_CONTAINER_KEYWORDS = frozenset(_SCHEMA_MAPS)


def _schema_error_message(error: ValidationError) -> str:
    where = list(error.absolute_path)
    is_type_keyword = where and where[-1] == "type" and (len(where) < 2 or where[-2] not in _CONTAINER_KEYWORDS)
    if is_type_keyword and error.validator == "anyOf":
        return f"`type` must be one of {_TYPE_NAMES}, or a list of them; got {_show(error.instance)}."
    if error.validator == "type":
        expected = error.validator_value
        if expected == ["object", "boolean"]:
            return f"Must be a JSON Schema (an object or true/false); got {_show(error.instance)}."
        return f"Must be of JSON type {expected}; got {_show(error.instance)}."
    if error.validator == "format" and error.validator_value == "regex":
        return f"Not a valid regular expression: {_show(error.instance)}."
    return f"Not valid JSON Schema (Draft 2020-12): {_clip(error.message, 200)}."


def _check_refs(schema: dict[str, Any], path: str, errors: list[Finding], warnings: list[Finding]) -> None:
    anchors = _anchors(schema)
    for sub_path, sub in _subschemas(schema, path):
        ref = sub.get("$ref")
        if not isinstance(ref, str):
            continue
        ref_path = _key(sub_path, "$ref")
        if not ref.startswith("#"):
            warnings.append(
                Finding(
                    ref_path,
                    f"`$ref` {ref} points outside this schema, so the registry can neither check it "
                    "nor compare it across versions; move the definition under `$defs`.",
                )
            )
        elif _pointer(schema, ref, anchors) is _MISSING:
            errors.append(
                Finding(ref_path, f"`$ref` {ref} does not resolve inside this schema; define it under `$defs`.")
            )


def _check_guardrails(guardrails: Any, tool_names: set[str], errors: list[Finding]) -> None:
    if not isinstance(guardrails, dict):
        errors.append(Finding("guardrails", "Must be an object with `default` and `rules`, or {}."))
        return
    for key in sorted(set(guardrails) - set(GUARDRAIL_KEYS)):
        errors.append(Finding(_key("guardrails", key), "Unknown key; guardrails has only `default` and `rules`."))
    if "default" in guardrails and not _is_effect(guardrails["default"]):
        errors.append(Finding("guardrails.default", f"Must be one of {', '.join(EFFECTS)}."))
    rules = guardrails.get("rules", [])
    if not isinstance(rules, list):
        errors.append(Finding("guardrails.rules", 'Must be a list of {"tool", "effect", "reason"} rules.'))
        return
    first_rule: dict[str, int] = {}
    for i, rule in enumerate(rules):
        _check_rule(rule, f"guardrails.rules[{i}]", tool_names, first_rule, errors)
        if isinstance(rule, dict) and isinstance(rule.get("tool"), str):
            first_rule.setdefault(rule["tool"], i)


def _check_rule(rule: Any, path: str, tool_names: set[str], first_rule: dict[str, int], errors: list[Finding]) -> None:
    if not isinstance(rule, dict):
        errors.append(Finding(path, 'Each rule must be an object {"tool", "effect", "reason"?}.'))
        return
    for key in sorted(set(rule) - set(RULE_KEYS)):
        errors.append(Finding(_key(path, key), "Unknown key; a rule has `tool`, `effect` and an optional `reason`."))
    tool = rule.get("tool")
    if not isinstance(tool, str):
        errors.append(Finding(f"{path}.tool", "Name the tool this rule applies to."))
    elif tool not in tool_names:
        errors.append(
            Finding(f"{path}.tool", f"The bundle has no tool `{tool}`{_did_you_mean(tool, tool_names)}; fix the name.")
        )
    elif tool in first_rule:
        errors.append(
            Finding(
                f"{path}.tool",
                f"`{tool}` already has a rule (guardrails.rules[{first_rule[tool]}]); keep one rule per tool.",
            )
        )
    if not _is_effect(rule.get("effect")):
        errors.append(Finding(f"{path}.effect", f"Must be one of {', '.join(EFFECTS)}."))
    if "reason" in rule and not isinstance(rule["reason"], str):
        errors.append(Finding(f"{path}.reason", "Must be a string."))


def _is_effect(value: Any) -> bool:
    return isinstance(value, str) and value in EFFECTS


def _did_you_mean(name: str, candidates: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


# Prompt references ------------------------------------------------------------------------------------

# No lazy group before `\s*`: "{{tool:" and 200,000 spaces would take quadratic time.
_EXPLICIT_REF = re.compile(r"\{\{\s*tool\s*:([^{}]*)\}\}")
_FENCE = re.compile(r"(```|~~~).*?(?:\1|\Z)", re.S)
_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_IDENTIFIER_CALL = re.compile(r"([^\W\d][\w-]*)(\(.*\))?", re.S)
_SNAKE = re.compile(r"[^\W_]_+[^\W_]")
_CAMEL = re.compile(r"[a-z][A-Z]")


@dataclass(frozen=True)
class _Ref:
    name: str
    at: int  # character offset in the prompt
    explicit: bool


@dataclass
class _PreviousTools:
    names: set[str] = field(default_factory=set)
    gone: dict[str, str | None] = field(default_factory=dict)  # removed -> None, renamed -> new name


def _check_prompt(
    doc: dict[str, Any],
    previous: dict[str, Any] | None,
    not_tools: set[str],
    errors: list[Finding],
    warnings: list[Finding],
) -> None:
    prompt = doc.get("system_prompt")
    if not isinstance(prompt, str):
        return
    tools = _tools(doc)
    names = {t["name"] for t in tools}
    prev = _previous_tools(previous, tools)
    exempt = not_tools.union(
        *(_identifiers(t.get("input_schema")) for t in tools), _identifiers(doc.get("output_schema"))
    )
    reported: set[str] = set()
    for ref in _prompt_references(prompt, exempt, prev.names):
        if ref.name in names or ref.name in reported:
            continue
        reported.add(ref.name)
        errors.append(Finding("system_prompt", _missing_tool_message(prompt, ref, names, prev)))
    for old_name, new_name in prev.gone.items():
        mention = re.search(rf"(?<![\w-]){re.escape(old_name)}(?![\w-])", prompt)
        if mention and old_name not in reported:
            warnings.append(
                Finding("system_prompt", _stale_mention_message(prompt, old_name, new_name, mention.start()))
            )


def _previous_tools(previous: dict[str, Any] | None, tools: list[dict[str, Any]]) -> _PreviousTools:
    if previous is None:
        return _PreviousTools()
    old = _tools(previous)
    names = {t["name"] for t in tools}
    removed = [t for t in old if t["name"] not in names]
    old_names = {t["name"] for t in old}
    renamed = _match_renames(removed, [t for t in tools if t["name"] not in old_names])
    return _PreviousTools(old_names, {t["name"]: renamed.get(t["name"]) for t in removed})


def _prompt_references(prompt: str, exempt: set[str], previous_names: set[str]) -> list[_Ref]:
    refs = [_Ref(m.group(1).strip(), m.start(), explicit=True) for m in _EXPLICIT_REF.finditer(prompt)]
    # Blank out fenced blocks but keep offsets, so line and column numbers stay right.
    masked = _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), prompt)
    for m in _CODE_SPAN.finditer(masked):
        name = _tool_shaped(m.group(1).strip(), exempt, previous_names)
        if name is not None:
            refs.append(_Ref(name, m.start(), explicit=False))
    return sorted(refs, key=lambda r: r.at)


def _tool_shaped(text: str, exempt: set[str], previous_names: set[str]) -> str | None:
    """The identifier a code span refers to as a tool, or None for ordinary code (see module docstring)."""
    m = _IDENTIFIER_CALL.fullmatch(text)
    if m is None:
        return None
    name, is_call = m.group(1), m.group(2) is not None
    if name in previous_names:
        return name
    if name in exempt or name.isupper():
        return None
    if _SNAKE.search(name) or (is_call and _CAMEL.search(name)):
        return name
    return None


def _line_col(text: str, at: int) -> str:
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def _missing_tool_message(prompt: str, ref: _Ref, names: set[str], prev: _PreviousTools) -> str:
    where = _line_col(prompt, ref.at)
    shown = f"{{{{tool:{ref.name}}}}}" if ref.explicit else ref.name
    if ref.name in prev.gone and prev.gone[ref.name]:
        return (
            f"The prompt references `{shown}` ({where}), which this version renames to "
            f"`{prev.gone[ref.name]}`; update the prompt so the model does not call a tool that no longer exists."
        )
    if ref.name in prev.gone:
        return (
            f"The prompt references `{shown}` ({where}), which this version removes; "
            "remove the reference or keep the tool."
        )
    if not TOOL_NAME_RE.fullmatch(ref.name):
        return (
            f"The prompt references `{shown}` ({where}), which cannot be a tool: tool names match "
            f"{TOOL_NAME_RE.pattern}; fix the name."
        )
    hint = "" if ref.explicit else f" (if it is not a tool, list it in metadata.{NOT_TOOLS_KEY})"
    return (
        f"The prompt references `{shown}` ({where}), but the bundle has no tool of that name"
        f"{_did_you_mean(ref.name, names)}; fix the name or add the tool{hint}."
    )


def _stale_mention_message(prompt: str, old_name: str, new_name: str | None, at: int) -> str:
    where = _line_col(prompt, at)
    if new_name:
        return (
            f"The prompt still mentions `{old_name}` ({where}), which this version renames to `{new_name}`; "
            "reword it so the model does not try to call the old name."
        )
    return (
        f"The prompt still mentions `{old_name}` ({where}), which the previous version had and this one removes; "
        "reword it so the model does not try to call it."
    )


# diff_contents ----------------------------------------------------------------------------------------


def diff_contents(old: dict[str, Any], new: dict[str, Any]) -> Diff:
    """Classify what changed from old to new (both normalised content documents)."""
    match = _match_tools(_tools(old), _tools(new))
    changes = [
        *_diff_prompt(old.get("system_prompt"), new.get("system_prompt")),
        *_diff_tools(match),
        *_diff_guardrails(old.get("guardrails"), new.get("guardrails"), match),
        *_diff_output(old.get("output_schema"), new.get("output_schema")),
        *_diff_settings("model", old.get("model"), new.get("model")),
        *_diff_settings("metadata", old.get("metadata"), new.get("metadata")),
        *(_change(kind, path, message) for kind, path, message in variables.diff(old, new)),
    ]
    level = max((c.level for c in changes), key=LEVELS.index, default="patch")
    return Diff(level=level, changes=changes)


def _change(kind: str, path: str, message: str, tool: str | None = None) -> Change:
    return Change(level=_LEVEL_OF[kind], kind=kind, path=path, message=message, tool=tool)


def _diff_prompt(old: Any, new: Any) -> list[Change]:
    if old == new:
        return []
    size = f"{len(old)} to {len(new)} characters" if isinstance(old, str) and isinstance(new, str) else "rewritten"
    return [_change("prompt_changed", "system_prompt", f"The system prompt's wording changed ({size}).")]


@dataclass(frozen=True)
class _ToolMatch:
    old: list[dict[str, Any]]
    new: list[dict[str, Any]]
    renamed: dict[str, str]  # old name -> new name

    def counterpart(self, old_name: str) -> dict[str, Any] | None:
        """The new version of an old tool: same name, or its rename."""
        new_name = self.renamed.get(old_name, old_name)
        return next((t for t in self.new if t["name"] == new_name), None)


def _match_tools(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> _ToolMatch:
    old_names, new_names = {t["name"] for t in old}, {t["name"] for t in new}
    removed = [t for t in old if t["name"] not in new_names]
    added = [t for t in new if t["name"] not in old_names]
    return _ToolMatch(old, new, _match_renames(removed, added))


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


def _diff_tools(match: _ToolMatch) -> list[Change]:
    changes: list[Change] = []
    for old_tool in match.old:
        name = old_tool["name"]
        new_tool = match.counterpart(name)
        if new_tool is None:
            changes.append(
                _change(
                    "tool_removed",
                    f"tools[{name}]",
                    f"Tool `{name}` was removed; agents that plan to call it will fail.",
                    name,
                )
            )
            continue
        if new_tool["name"] != name:
            changes.append(
                _change(
                    "tool_renamed",
                    f"tools[{name}].name",
                    f"Tool `{name}` was renamed to `{new_tool['name']}`; agents that call the old name will fail.",
                    name,
                )
            )
        changes.extend(_diff_tool(old_tool, new_tool))
    kept = {t["name"] for t in map(match.counterpart, (t["name"] for t in match.old)) if t is not None}
    for new_tool in match.new:
        if new_tool["name"] not in kept:
            name = new_tool["name"]
            changes.append(_change("tool_added", f"tools[{name}]", f"Tool `{name}` was added.", name))
    changes.extend(_diff_tool_order(match, kept))
    return changes


def _diff_tool(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    name = new["name"]
    changes = []
    if old.get("description") != new.get("description"):
        changes.append(
            _change(
                "tool_description_changed",
                f"tools[{name}].description",
                f"The description of tool `{name}` changed.",
                name,
            )
        )
    schema_diff = _SchemaDiff("input", name, old.get("input_schema"), new.get("input_schema"))
    changes.extend(schema_diff.run(f"tools[{name}].input_schema"))
    return changes


def _diff_tool_order(match: _ToolMatch, kept: set[str]) -> list[Change]:
    before = [match.renamed.get(t["name"], t["name"]) for t in match.old]
    after = [t["name"] for t in match.new if t["name"] in kept]
    if [n for n in before if n in kept] == after:
        return []
    return [_change("tools_reordered", "tools", "The tools are listed in a different order.")]


def _diff_output(old: Any, new: Any) -> list[Change]:
    if old is None and new is None:
        return []
    if old is None:
        return [
            _change(
                "output_schema_added",
                "output_schema",
                "The bundle now declares an output_schema; consumers that parsed free text must parse it instead.",
            )
        ]
    if new is None:
        return [
            _change(
                "output_schema_removed",
                "output_schema",
                "The output_schema was removed; consumers that rely on structured output lose their contract.",
            )
        ]
    return _SchemaDiff("output", None, old, new).run("output_schema")


# Guardrails --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Policy:
    default: str
    rules: dict[str, dict[str, Any]]  # tool -> rule

    def effect(self, tool: str) -> str:
        rule = self.rules.get(tool)
        return rule["effect"] if rule else self.default


def _policy(guardrails: Any) -> _Policy | None:
    """The guardrails as a policy, or None when they are not in the documented structure."""
    if not isinstance(guardrails, dict) or set(guardrails) - set(GUARDRAIL_KEYS):
        return None
    default, rules = guardrails.get("default", "allow"), guardrails.get("rules", [])
    if not _is_effect(default) or not isinstance(rules, list):
        return None
    by_tool: dict[str, dict[str, Any]] = {}
    for rule in rules:
        valid = (
            isinstance(rule, dict)
            and not set(rule) - set(RULE_KEYS)
            and isinstance(rule.get("tool"), str)
            and _is_effect(rule.get("effect"))
            and isinstance(rule.get("reason", ""), str)
        )
        if not valid or rule["tool"] in by_tool:
            return None
        by_tool[rule["tool"]] = rule
    return _Policy(default, by_tool)


def _diff_guardrails(old: Any, new: Any, match: _ToolMatch) -> list[Change]:
    if _same(_follow_renames(old, match.renamed), new):
        return []  # identical, or only following a tool rename that is reported once, as tool_renamed
    before, after = _policy(old), _policy(new)
    if before is None or after is None:
        return [
            _change(
                "guardrails_changed",
                "guardrails",
                "The guardrails changed and are not in the documented {default, rules} structure, "
                "so the registry cannot tell whether they tightened; treat it as breaking.",
            )
        ]
    changes = []
    if before.default != after.default:
        changes.append(_effect_change("guardrails.default", "The default guardrail", before.default, after.default))
    for old_tool in match.old:
        new_tool = match.counterpart(old_tool["name"])
        if new_tool is not None:
            changes.extend(_diff_rule(before, after, old_tool["name"], new_tool["name"]))
    if not changes:
        changes.append(
            _change(
                "guardrail_restated",
                "guardrails",
                "The guardrails were rewritten without changing any tool's effective effect.",
            )
        )
    return changes


def _follow_renames(guardrails: Any, renamed: dict[str, str]) -> Any:
    """The old guardrails with each renamed tool's rule under its new name."""
    if not renamed or not isinstance(guardrails, dict) or not isinstance(guardrails.get("rules"), list):
        return guardrails
    rules = [
        {**r, "tool": renamed.get(r["tool"], r["tool"])}
        if isinstance(r, dict) and isinstance(r.get("tool"), str)
        else r
        for r in guardrails["rules"]
    ]
    return {**guardrails, "rules": rules}


def _diff_rule(before: _Policy, after: _Policy, old_name: str, new_name: str) -> list[Change]:
    old_rule, new_rule = before.rules.get(old_name), after.rules.get(new_name)
    old_effect, new_effect = before.effect(old_name), after.effect(new_name)
    path = f"guardrails.rules[{new_name}]"
    if old_effect != new_effect:
        if old_rule is None and new_rule is None:
            return []  # follows the default, whose change is reported once at guardrails.default
        return [_effect_change(f"{path}.effect", f"Tool `{new_name}`", old_effect, new_effect, new_name)]
    if not _same(_without_tool(old_rule), _without_tool(new_rule)):
        message = f"The guardrail rule for `{new_name}` changed, but its effect is still {new_effect}."
        return [_change("guardrail_restated", path, message, new_name)]
    return []


def _without_tool(rule: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if rule is None else {k: v for k, v in rule.items() if k != "tool"}


def _effect_change(path: str, subject: str, old: str, new: str, tool: str | None = None) -> Change:
    if EFFECTS.index(new) > EFFECTS.index(old):
        consequence = "wait for confirmation" if new == "confirm" else "be refused"
        message = f"{subject} tightened from {old} to {new}; calls the agent plans will now {consequence}."
        return _change("guardrail_tightened", path, message, tool)
    return _change("guardrail_loosened", path, f"{subject} loosened from {old} to {new}.", tool)


# Model and metadata ------------------------------------------------------------------------------------


def _diff_settings(section: str, old: Any, new: Any) -> list[Change]:
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    changes = []
    for key in [*old, *(k for k in new if k not in old)]:
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if _same(before, after):
            continue
        shown = f"from {_value(before)} to {_value(after)}"
        if section == "metadata":
            kind, message = "metadata_changed", f"metadata.{key} changed {shown}."
        elif key in MODEL_IDENTITY_KEYS:
            kind, message = "model_changed", f"The model's {key} changed {shown}; evaluate the bundle before release."
        else:
            kind, message = "model_parameter_changed", f"The model setting {key} changed {shown}."
        changes.append(_change(kind, _key(section, key), message))
    return changes


def _value(value: Any) -> str:
    return "(absent)" if value is _MISSING else _show(value, 40)


# Schema comparison ------------------------------------------------------------------------------------

# base -> (kind for a tool input, kind for the output schema); levels come from COMPATIBILITY_RULES.
_KINDS = {
    "added_optional": ("parameter_added_optional", "output_property_added"),
    "added_required": ("parameter_added_required", "output_required_added"),
    "removed": ("parameter_removed", "output_property_removed"),
    "made_required": ("parameter_made_required", "output_required_added"),
    "made_optional": ("parameter_made_optional", "output_required_removed"),
    "type_changed": ("parameter_type_changed", "output_type_changed"),
    "type_widened": ("parameter_type_widened", "output_type_widened"),
    "enum_narrowed": ("enum_narrowed", "output_enum_narrowed"),
    "enum_widened": ("enum_widened", "output_enum_widened"),
    "tightened": ("parameter_constraint_tightened", "output_schema_narrowed"),
    "loosened": ("parameter_constraint_loosened", "output_schema_widened"),
    "changed": ("input_schema_changed", "output_schema_changed"),
    "annotation": ("input_schema_annotation_changed", "output_schema_annotation_changed"),
    "rewritten": ("input_schema_rewritten", "output_schema_rewritten"),
}
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "default",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
    }
)
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")
_VALUE_CONSTRAINTS = ("pattern", "format", "contentEncoding", "contentMediaType")
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_HANDLED = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "not",
        "multipleOf",
        "uniqueItems",
        "$defs",  # reached through $ref at the place of use
        "definitions",
        *_LOWER_BOUNDS,
        *_UPPER_BOUNDS,
        *_VALUE_CONSTRAINTS,
        *_COMBINATORS,
    }
)
# Without `$ref`s a comparison canonicalises each node once per level above it (at most 64 times
# the schema); `$ref`s can fan out exponentially (a "billion laughs" schema), so the work is capped,
# and a comparison that hits the cap is reported as one conservative major change.
_WORK_LIMIT = 64 * 1024 * 1024
_ALL_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_ANY: dict[str, Any] = {}
_NOTHING: dict[str, Any] = {"not": {}}


def _as_schema(value: Any) -> Any:
    """Boolean schemas as their object equivalents: true accepts anything, false nothing."""
    if value is True:
        return _ANY
    if value is False:
        return _NOTHING
    return value


def _resolve(node: Any, root: Any, anchors: dict[str, dict[str, Any]]) -> Any:
    """Follow same-document `$ref`s, laying sibling keywords over the target; `seen` stops a loop
    of `$ref`s that only point at each other."""
    seen: set[str] = set()
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"] not in seen:
        ref = node["$ref"]
        target = _as_schema(_pointer(root, ref, anchors))
        if not isinstance(target, dict):
            break
        seen.add(ref)
        node = {**target, **_siblings(node)}
    return node


def _siblings(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "$ref"}


_REF_IN_TEXT = re.compile(r'"\$ref": ("(?:[^"\\]|\\.)*")')


def _refs_in(text: str) -> set[str]:
    """The `$ref` strings in canonical JSON text (a `$ref` that is data, not schema, only costs time)."""
    return {json.loads(m.group(1)) for m in _REF_IN_TEXT.finditer(text)}


def _type_set(value: Any) -> frozenset[str] | None:
    """The JSON types a `type` keyword admits (all when absent), or None when it is malformed."""
    if value is _MISSING:
        return _ALL_TYPES
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return frozenset(value)
    return None


def _admits(types: frozenset[str], other: frozenset[str]) -> bool:
    """Whether every type in `other` is admitted by `types` (integers are numbers)."""
    return all(t in types or (t == "integer" and "number" in types) for t in other)


def _show_types(types: frozenset[str]) -> str:
    if types == _ALL_TYPES:
        return "any type"
    return next(iter(types)) if len(types) == 1 else "[" + ", ".join(sorted(types)) + "]"


def _allowed_values(schema: dict[str, Any], keyword: str) -> set[str] | None:
    """enum/const values as canonical JSON; None when absent. A malformed enum counts as one value."""
    if keyword not in schema:
        return None
    if keyword == "enum" and isinstance(schema["enum"], list):
        return {_canon(v) for v in schema["enum"]}
    return {_canon(schema[keyword])}


def _number(value: Any) -> Fraction | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return Fraction(str(value))  # exact, so multipleOf 0.1 divides 0.3
    except (ValueError, OverflowError):
        return None


class _SchemaDiff:
    """Compares two versions of one schema (a tool's input or the output) from the BACKWARD side."""

    def __init__(self, side: str, tool: str | None, old_root: Any, new_root: Any) -> None:
        self.output = side == "output"
        self.tool = tool
        self.roots = (old_root, new_root)
        self.anchors = (_anchors(old_root), _anchors(new_root))
        self.changes: list[Change] = []
        self.work = 0  # characters canonicalised so far, against _WORK_LIMIT
        self.expanded: set[tuple[str, str]] = set()
        self.changed_refs = self.find_changed_refs()

    # Two subschemas with the same text can still differ: a `$ref` inside may point at a target
    # that changed. So "same" means same text and no `$ref` whose target changed.

    def find_changed_refs(self) -> frozenset[str] | None:
        """The `$ref`s whose targets differ between the versions, directly or through other
        `$ref`s; None when that is too costly to work out (every `$ref` then counts as changed)."""
        old_root, new_root = self.roots
        refs = _refs_in(_canon(old_root)) | _refs_in(_canon(new_root))
        changed: set[str] = set()
        inside: dict[str, set[str]] = {}
        for ref in refs:
            old_target = _pointer(old_root, ref, self.anchors[0])
            new_target = _pointer(new_root, ref, self.anchors[1])
            old_text = "" if old_target is _MISSING else _canon(old_target)
            new_text = "" if new_target is _MISSING else _canon(new_target)
            self.work += len(old_text) + len(new_text)
            if self.work > _WORK_LIMIT:
                return None
            if old_text != new_text or (old_target is _MISSING) != (new_target is _MISSING):
                changed.add(ref)
            inside[ref] = _refs_in(old_text) | _refs_in(new_text)
        grew = True
        while grew:  # a target that refers to a changed target has changed too
            newly = [ref for ref in refs - changed if inside[ref] & changed]
            changed.update(newly)
            grew = bool(newly)
        return frozenset(changed)

    def same(self, a: Any, b: Any) -> bool:
        if a is _MISSING or b is _MISSING:
            return a is b
        a_text, b_text = _canon(a), _canon(b)
        self.work += len(a_text) + len(b_text)
        return self.same_text(a_text, b_text)

    def expand(self, old: Any, new: Any) -> tuple[Any, Any]:
        """Resolve `$ref`s on both sides. A pair of `$ref`s is expanded at its first place of use
        only, so a change inside a shared target is reported once, and recursive or fanned-out
        `$ref`s cost linear time; later places compare their sibling keywords alone."""
        if isinstance(old, dict) and isinstance(new, dict):
            pair = (old.get("$ref"), new.get("$ref"))
            if isinstance(pair[0], str) and isinstance(pair[1], str):
                if pair in self.expanded:
                    return _siblings(old), _siblings(new)
                self.expanded.add(pair)
        return _resolve(old, self.roots[0], self.anchors[0]), _resolve(new, self.roots[1], self.anchors[1])

    def same_text(self, a: str, b: str) -> bool:
        return a == b and self.stable(a)

    def stable(self, text: str) -> bool:
        """Whether no `$ref` in this canonical text points at a target that changed."""
        if self.changed_refs is None:
            return _REF_IN_TEXT.search(text) is None
        return not (self.changed_refs and _refs_in(text) & self.changed_refs)

    def run(self, path: str) -> list[Change]:
        old, new = self.roots
        if self.same(old, new):
            return []
        self.expanded.add(("#", "#"))  # the root is being compared: a `$ref` back to it adds nothing
        self.compare(old, new, path, "", 0)
        if self.work > _WORK_LIMIT:
            self.narrowed("changed", path, "", "is too large or too self-referential to compare in full")
        elif not self.changes:
            self.emit("rewritten", path, f"{self.subject('')} was rewritten without changing what it accepts.")
        return self.changes

    # Messages

    def emit(self, base: str, path: str, message: str) -> None:
        kind = _KINDS[base][self.output]
        self.changes.append(_change(kind, path, message, self.tool))

    def subject(self, name: str) -> str:
        if self.output:
            return f"Output field `{name}`" if name else "The output schema"
        return f"Parameter `{name}` of tool `{self.tool}`" if name else f"The input of tool `{self.tool}`"

    def breaks(self) -> str:
        if self.output:
            return "output valid under the previous version can fail the new schema"
        return "calls the agent plans against the previous version can be rejected"

    def narrowed(self, base: str, path: str, name: str, what: str) -> None:
        self.emit(base, path, f"{self.subject(name)} {what}; {self.breaks()}.")

    def widened(self, base: str, path: str, name: str, what: str) -> None:
        self.emit(base, path, f"{self.subject(name)} {what}, which is compatible.")

    # Comparison

    def compare(self, old: Any, new: Any, path: str, name: str, depth: int) -> None:
        old, new = _as_schema(old), _as_schema(new)
        if self.work > _WORK_LIMIT or self.same(old, new):
            return
        old, new = self.expand(old, new)
        if self.same(old, new):
            return
        if not isinstance(old, dict) or not isinstance(new, dict) or depth > MAX_SCHEMA_DEPTH:
            self.narrowed("changed", path, name, "changed in a way the registry cannot compare")
            return
        if not self.types(old, new, path, name):
            return  # the types no longer overlap: differences below them are noise
        for keyword in ("enum", "const"):
            self.values(old, new, keyword, path, name)
        self.objects(old, new, path, name, depth)
        self.arrays(old, new, path, name, depth)
        self.bounds(old, new, path, name)
        self.combinators(old, new, path, name, depth)
        self.rest(old, new, path, name)

    def types(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str) -> bool:
        """Report a type change; False when old and new types share nothing."""
        before, after = old.get("type", _MISSING), new.get("type", _MISSING)
        if self.same(before, after):
            return True
        old_types, new_types = _type_set(before), _type_set(after)
        at = _key(path, "type")
        if old_types is None or new_types is None:
            self.narrowed("changed", at, name, "changed its `type` keyword")
            return True
        shown = f"from {_show_types(old_types)} to {_show_types(new_types)}"
        if _admits(new_types, old_types):
            if not _admits(old_types, new_types):
                self.widened("type_widened", at, name, f"widened its type {shown}")
            return True
        self.narrowed("type_changed", at, name, f"changed type {shown}")
        overlap = any(_admits(new_types, {t}) for t in old_types) or any(_admits(old_types, {t}) for t in new_types)
        return overlap

    def values(self, old: dict[str, Any], new: dict[str, Any], keyword: str, path: str, name: str) -> None:
        before, after = _allowed_values(old, keyword), _allowed_values(new, keyword)
        if before == after:
            return
        at = _key(path, keyword)
        if before is None:
            self.narrowed("enum_narrowed", at, name, f"is now restricted by `{keyword}`")
        elif after is None:
            self.widened("enum_widened", at, name, f"is no longer restricted by `{keyword}`")
        elif before - after:
            self.narrowed("enum_narrowed", at, name, f"no longer accepts {', '.join(sorted(before - after))}")
        else:
            self.widened("enum_widened", at, name, f"now also accepts {', '.join(sorted(after - before))}")

    def objects(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str, depth: int) -> None:
        before, after = old.get("properties", {}), new.get("properties", {})
        if not isinstance(before, dict) or not isinstance(after, dict):
            if not self.same(before, after):
                self.narrowed("changed", _key(path, "properties"), name, "changed a malformed `properties`")
            before = after = {}  # the change is reported; compare the rest
        req_before, req_after = old.get("required", []), new.get("required", [])
        if not (_names(req_before) and _names(req_after)):
            if not self.same(req_before, req_after):
                self.narrowed("changed", _key(path, "required"), name, "changed a malformed `required`")
            req_before = req_after = []  # the change is reported; compare the properties alone
        required_before, required_after = set(req_before), set(req_after)
        declared = [*before, *(p for p in after if p not in before)]
        for prop in declared:
            self.property(prop, before, after, (required_before, required_after), path, name, depth)
        # `required` may name properties that `properties` does not declare.
        for prop in sorted((required_before ^ required_after) - set(declared)):
            self.requirement(prop, (required_before, required_after), path, name)
        self.additional(old, new, path, name, depth)

    def property(
        self,
        prop: str,
        before: dict[str, Any],
        after: dict[str, Any],
        required: tuple[set[str], set[str]],
        path: str,
        name: str,
        depth: int,
    ) -> None:
        at, sub = _key(_key(path, "properties"), prop), f"{name}.{prop}" if name else prop
        if prop not in after:
            self.narrowed("removed", at, sub, "was removed")
        elif prop not in before:
            if prop in required[1]:
                self.narrowed("added_required", at, sub, "was added as required")
            else:
                self.widened("added_optional", at, sub, "was added as optional")
        else:
            self.compare(before[prop], after[prop], at, sub, depth + 1)
            self.requirement(prop, required, path, name)

    def requirement(self, prop: str, required: tuple[set[str], set[str]], path: str, name: str) -> None:
        at, sub = _key(_key(path, "properties"), prop), f"{name}.{prop}" if name else prop
        if prop in required[1] and prop not in required[0]:
            self.narrowed("made_required", at, sub, "is now required")
        elif prop in required[0] and prop not in required[1]:
            self.widened("made_optional", at, sub, "is now optional")

    def additional(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str, depth: int) -> None:
        self.open_ended(old, new, "additionalProperties", path, name, f"{name}.*" if name else "*", depth)

    def open_ended(
        self, old: dict[str, Any], new: dict[str, Any], keyword: str, path: str, name: str, child: str, depth: int
    ) -> None:
        """A keyword whose absence means "anything": additionalProperties, items. `child` names
        what the keyword's subschema describes (`lines[]`, `meta.*`)."""
        before, after = _as_schema(old.get(keyword, _ANY)), _as_schema(new.get(keyword, _ANY))
        if self.same(before, after):
            return
        at = _key(path, keyword)
        if isinstance(before, list) or isinstance(after, list):  # pre-2020 tuple `items`
            self.narrowed("changed", at, name, f"changed `{keyword}`")
        elif after == _ANY:
            self.widened("loosened", at, name, f"no longer restricts `{keyword}`")
        elif before == _ANY and after == _NOTHING:
            forbidden = "extra properties" if keyword == "additionalProperties" else "items"
            self.narrowed("tightened", at, name, f"now forbids {forbidden}")
        elif before == _ANY:
            self.narrowed("tightened", at, name, f"now restricts `{keyword}`")
        else:
            self.compare(before, after, at, child, depth + 1)

    def arrays(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str, depth: int) -> None:
        self.open_ended(old, new, "items", path, name, f"{name}[]" if name else "[]", depth)
        before, after = old.get("prefixItems", []), new.get("prefixItems", [])
        if self.same(before, after):
            return
        at = _key(path, "prefixItems")
        if not isinstance(before, list) or not isinstance(after, list):
            self.narrowed("changed", at, name, "changed `prefixItems`")
            return
        for i, (a, b) in enumerate(zip(before, after, strict=False)):
            self.compare(a, b, f"{at}[{i}]", f"{name}[{i}]", depth + 1)
        if len(after) > len(before):
            self.narrowed("tightened", at, name, "constrains more leading items")
        elif len(after) < len(before):
            self.widened("loosened", at, name, "constrains fewer leading items")

    def bounds(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str) -> None:
        for keyword in (*_LOWER_BOUNDS, *_UPPER_BOUNDS, "multipleOf"):
            self.bound(old, new, keyword, path, name)
        for keyword in (*_VALUE_CONSTRAINTS, "uniqueItems", "not"):
            before, after = old.get(keyword, _MISSING), new.get(keyword, _MISSING)
            if keyword == "uniqueItems":  # false and absent mean the same
                before, after = (before is True) or _MISSING, (after is True) or _MISSING
            if self.same(before, after):
                continue
            at, what = _key(path, keyword), f"`{keyword}` from {_value(before)} to {_value(after)}"
            if before is _MISSING:
                self.narrowed("tightened", at, name, f"added {what}")
            elif after is _MISSING:
                self.widened("loosened", at, name, f"dropped {what}")
            else:
                self.narrowed("tightened", at, name, f"changed {what}")

    def bound(self, old: dict[str, Any], new: dict[str, Any], keyword: str, path: str, name: str) -> None:
        before, after = old.get(keyword, _MISSING), new.get(keyword, _MISSING)
        if self.same(before, after):
            return
        at, what = _key(path, keyword), f"`{keyword}` from {_value(before)} to {_value(after)}"
        if before is _MISSING:
            self.narrowed("tightened", at, name, f"added {what}")
            return
        if after is _MISSING:
            self.widened("loosened", at, name, f"dropped {what}")
            return
        a, b = _number(before), _number(after)
        if a is None or b is None or (keyword == "multipleOf" and b == 0):
            self.narrowed("changed", at, name, f"changed {what}")
            return
        if keyword == "multipleOf":
            looser = a % b == 0  # every multiple of the old step is a multiple of the new one
        else:
            looser = b < a if keyword in _LOWER_BOUNDS else b > a
        if looser:
            self.widened("loosened", at, name, f"loosened {what}")
        else:
            self.narrowed("tightened", at, name, f"tightened {what}")

    def combinators(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str, depth: int) -> None:
        for keyword in _COMBINATORS:
            before, after = old.get(keyword, _MISSING), new.get(keyword, _MISSING)
            if self.same(before, after):
                continue
            at = _key(path, keyword)
            # More anyOf/oneOf branches admit more; more allOf branches admit less.
            grows = "loosened" if keyword != "allOf" else "tightened"
            shrinks = "tightened" if keyword != "allOf" else "loosened"
            if before is _MISSING or after is _MISSING:
                base = "tightened" if before is _MISSING else "loosened"
                self.report(base, at, name, f"{'added' if before is _MISSING else 'dropped'} `{keyword}`")
                continue
            if not isinstance(before, list) or not isinstance(after, list):
                self.narrowed("changed", at, name, f"changed `{keyword}`")
                continue
            old_set, new_set = {_canon(b) for b in before}, {_canon(b) for b in after}
            if not self.stable(_canon(sorted(old_set & new_set))):
                old_set = new_set = set()  # a shared branch's $ref target changed: compare pairwise
            if old_set < new_set:
                self.report(grows, at, name, f"gained `{keyword}` branches")
            elif new_set < old_set:
                self.report(shrinks, at, name, f"lost `{keyword}` branches")
            elif len(before) == len(after):
                for i, (a, b) in enumerate(zip(before, after, strict=True)):
                    self.compare(a, b, f"{at}[{i}]", name, depth + 1)
            else:
                self.narrowed("changed", at, name, f"changed its `{keyword}` branches")

    def report(self, base: str, path: str, name: str, what: str) -> None:
        if base == "loosened":
            self.widened(base, path, name, what)
        else:
            self.narrowed(base, path, name, what)

    def rest(self, old: dict[str, Any], new: dict[str, Any], path: str, name: str) -> None:
        """Annotations are patch; any other keyword the comparison does not model is major."""
        for keyword in [*old, *(k for k in new if k not in old)]:
            if keyword in _HANDLED:
                continue
            before, after = old.get(keyword, _MISSING), new.get(keyword, _MISSING)
            if self.same(before, after):
                continue
            at = _key(path, keyword)
            if keyword in _ANNOTATIONS:
                self.emit(
                    "annotation", at, f"{self.subject(name)} changed its `{keyword}`, which does not affect validation."
                )
            else:
                self.narrowed("changed", at, name, f"changed `{keyword}` in a way the registry cannot prove compatible")


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
