"""check_content: what is wrong with a content document (errors) and what looks wrong against
the previous version (warnings). See the package docstring for how a prompt references tools."""

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import ValidationError

from core.limits import TOOL_NAME_RE
from registry import variables
from registry.contracts.base import (
    _DIALECT,
    _META,
    _MISSING,
    _SCHEMA_MAPS,
    EFFECTS,
    GUARDRAIL_KEYS,
    MAX_SCHEMA_DEPTH,
    NOT_TOOLS_KEY,
    RULE_KEYS,
    CheckResult,
    Finding,
    _anchors,
    _canon,
    _clip,
    _identifiers,
    _is_effect,
    _join,
    _key,
    _match_renames,
    _pointer,
    _show,
    _subschemas,
    _too_deep,
    _tools,
)
from registry.skills_content import content_warnings as skills_content_warnings

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
