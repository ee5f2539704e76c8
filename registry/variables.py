"""Variables and knowledge packs in the content document (see docs/rendering.md).

Two optional top-level fields, each present in the canonical document only when the author
wrote it, so that content without them keeps exactly the bytes (and hash) it had before:

- `variables`: {"name": {"type", "values" (enum), "required", "default", "scope", "description"}}.
  `{{name}}` in `system_prompt` is filled from the session's values when the prompt is rendered.
  Content WITHOUT a `variables` key is never templated: any `{{...}}` in it stays verbatim.
- `knowledge`: ["pack-a", ...], the knowledge packs the model may explore with the file tools.

This module is pure (no database): `normalise` validates the two fields for
registry.canonical, `check` adds the publish-time findings for registry.contracts, and
`resolve`/`fill` turn given values into the ones a session or a turn uses.
"""

import json
import math
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.limits import BUNDLE_NAME_RE

FIELDS = frozenset({"variables", "knowledge"})
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
PACK_NAME_RE = re.compile(BUNDLE_NAME_RE)  # packs are named like bundles


def _variable_key(name: str) -> str:
    """Where an error about a given value is reported: its name, or ascii() of what was sent
    when it is not a name (client input, maybe not even valid Unicode)."""
    return f"variables.{name if NAME_RE.fullmatch(name) else ascii(name)}"


# `{{name}}`, whitespace allowed inside the braces; `{{tool:NAME}}` has a colon, so it never matches.
REFERENCE_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
TYPES = ("string", "integer", "number", "boolean", "enum")
SCOPES = ("session", "turn")
DECLARATION_KEYS = frozenset({"type", "values", "required", "default", "scope", "description"})
MAX_VARIABLES = 100
MAX_PACKS = 20
MAX_VALUE_CHARS = 10_000
# The file tools the render serves when a version lists packs; a bundle tool may not shadow them.
KNOWLEDGE_TOOL_NAMES = ("ls", "glob", "grep", "read")
# A session variable whose name or description says one of these words is probably volatile.
_DATEISH = frozenset({"today", "now", "date", "time", "timestamp", "datetime"})
TIMEZONE_VARIABLE = "timezone"

Err = Callable[[str, str], None]


def normalise(content: dict[str, Any], err: Err) -> dict[str, Any]:
    """The two optional fields as they go into the canonical document (only those present),
    reporting problems through `err(path, message)` like registry.canonical does."""
    doc: dict[str, Any] = {}
    if "variables" in content:
        doc["variables"] = content["variables"]
        _check_declarations(content["variables"], err)
    if "knowledge" in content:
        doc["knowledge"] = content["knowledge"]
        _check_packs(content["knowledge"], err)
    return doc


def _check_declarations(variables: Any, err: Err) -> None:
    if not isinstance(variables, dict):
        err("content.variables", "Must be an object mapping each variable name to its declaration.")
        return
    if len(variables) > MAX_VARIABLES:
        err("content.variables", f"At most {MAX_VARIABLES} variables.")
    for name, decl in variables.items():
        path = f"content.variables.{name}"
        if not NAME_RE.fullmatch(name):
            err(path, "A variable name must match ^[A-Za-z_][A-Za-z0-9_]{0,63}$.")
        elif not isinstance(decl, dict):
            err(path, "Must be an object with at least a type.")
        else:
            _check_declaration(decl, path, err)


def _check_declaration(decl: dict[str, Any], path: str, err: Err) -> None:
    for key in sorted(set(decl) - DECLARATION_KEYS):
        err(f"{path}.{key}", f"Unknown field; a declaration has {', '.join(sorted(DECLARATION_KEYS))}.")
    kind = decl.get("type")
    if kind not in TYPES:
        err(f"{path}.type", f"Must be one of {', '.join(TYPES)}.")
        return
    if kind == "enum":
        values = decl.get("values")
        if not isinstance(values, list) or not values or not all(_is_scalar(v) for v in values):
            err(f"{path}.values", "An enum needs a non-empty list of strings, numbers or booleans.")
            return
        if len({json.dumps(v) for v in values}) != len(values):
            err(f"{path}.values", "The values must be distinct.")
    elif "values" in decl:
        err(f"{path}.values", "Only an enum has values.")
    if "required" in decl and not isinstance(decl["required"], bool):
        err(f"{path}.required", "Must be true or false.")
    if decl.get("scope", "session") not in SCOPES:
        err(f"{path}.scope", "Must be session or turn.")
    if "description" in decl and not isinstance(decl["description"], str):
        err(f"{path}.description", "Must be a string.")
    if "default" in decl:
        problem = value_problem(decl, decl["default"])
        if problem:
            err(f"{path}.default", problem)


def _check_packs(packs: Any, err: Err) -> None:
    if not isinstance(packs, list) or not all(isinstance(p, str) for p in packs):
        err("content.knowledge", "Must be a list of knowledge pack names.")
        return
    if len(packs) > MAX_PACKS:
        err("content.knowledge", f"At most {MAX_PACKS} packs.")
    seen: set[str] = set()
    for i, name in enumerate(packs):
        if not PACK_NAME_RE.fullmatch(name):
            err(f"content.knowledge[{i}]", "A pack name must match ^[a-z0-9][a-z0-9._-]{0,99}$.")
        elif name in seen:
            err(f"content.knowledge[{i}]", f"Pack {name!r} is listed twice.")
        seen.add(name)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))


def value_problem(decl: dict[str, Any], value: Any) -> str | None:
    """Why `value` is not a valid value of the declared variable, or None."""
    kind = decl.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "Must be a string."
        if len(value) > MAX_VALUE_CHARS:
            return f"At most {MAX_VALUE_CHARS} characters."
        if "\x00" in value:
            return "May not contain NUL characters."
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate: neither storable nor sendable to a model
            return "Must be valid Unicode text."
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return "Must be an integer."
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "Must be a number."
    elif kind == "boolean":
        if not isinstance(value, bool):
            return "Must be true or false."
    elif kind == "enum":
        # `type(...) is` so that true is not taken for 1, nor 1 for 1.0.
        if not any(type(v) is type(value) and v == value for v in decl.get("values", [])):
            return f"Must be one of {', '.join(json.dumps(v, ensure_ascii=False) for v in decl.get('values', []))}."
    return None


def references(prompt: str) -> list[re.Match[str]]:
    return list(REFERENCE_RE.finditer(prompt))


def check(doc: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Publish-time findings (errors, warnings) as (path, message), paths without `content.`."""
    errors: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    if "knowledge" in doc and isinstance(doc.get("tools"), list):
        for i, tool in enumerate(doc["tools"]):
            if isinstance(tool, dict) and tool.get("name") in KNOWLEDGE_TOOL_NAMES:
                errors.append(
                    (
                        f"tools[{i}].name",
                        f"{tool['name']!r} is one of the knowledge file tools ({', '.join(KNOWLEDGE_TOOL_NAMES)}) "
                        "that a version listing knowledge packs gets; rename this tool.",
                    )
                )
    variables = doc.get("variables")
    if not isinstance(variables, dict):
        return errors, warnings
    prompt = _of_type(doc.get("system_prompt"), str, "")
    reported: set[str] = set()
    for match in references(prompt):
        name = match.group(1)
        if name in reported:
            continue
        decl = variables.get(name)
        where = _line_col(prompt, match.start())
        if decl is None:
            reported.add(name)
            errors.append(("system_prompt", f"{{{{{name}}}}} at {where} is not declared in variables."))
        elif isinstance(decl, dict) and decl.get("scope") == "turn":
            reported.add(name)
            errors.append(
                (
                    "system_prompt",
                    f"{{{{{name}}}}} at {where} is turn-scoped: it would change the prompt prefix every turn "
                    "and break the provider's cache. Make it session-scoped, or leave it out of the prompt "
                    "(turn values are given to the model in the render's tail).",
                )
            )
    for name, decl in variables.items():
        if not isinstance(decl, dict) or decl.get("scope", "session") != "session" or name == TIMEZONE_VARIABLE:
            continue
        words = set(re.findall(r"[a-z]+", f"{name.replace('_', ' ')} {decl.get('description', '')}".lower()))
        if words & _DATEISH:
            warnings.append(
                (
                    f"variables.{name}",
                    f"{name!r} looks like a date or time: a session-scoped value is frozen into the prompt "
                    "prefix for the whole session. The render's tail already carries the current date and "
                    "time; make it turn-scoped if the model needs another one.",
                )
            )
    return errors, warnings


def _line_col(text: str, at: int) -> str:
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"


class VariableError(ValueError):
    """Given values do not fit the declarations; `details` maps `variables.<name>` to messages."""

    def __init__(self, message: str, details: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


def resolve(declared: dict[str, Any] | None, given: Any, *, scope: str) -> dict[str, Any]:
    """The values of `scope`'s variables: the given ones checked against their declarations,
    then the defaults; raises VariableError naming every variable that is wrong."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise VariableError("variables must be an object.", {"variables": ["Expected a JSON object."]})
    if declared is None:
        if given:
            raise VariableError(
                "This version declares no variables.",
                {_variable_key(name): ["Not declared by the pinned version."] for name in sorted(given)},
            )
        return {}
    errors: dict[str, list[str]] = {}
    values = _given_values(declared, given, scope=scope, errors=errors)
    for name, decl in sorted(declared.items()):
        if decl.get("scope", "session") != scope or name in given:
            continue
        if "default" in decl:
            values[name] = decl["default"]
        elif decl.get("required"):
            errors[f"variables.{name}"] = ["This variable is required."]
    if errors:
        names = ", ".join(k.removeprefix("variables.") for k in errors)
        raise VariableError(f"Invalid variables: {names}.", errors)
    return values


def _given_values(
    declared: dict[str, Any], given: dict[str, Any], *, scope: str, errors: dict[str, list[str]]
) -> dict[str, Any]:
    """The given values that fit their declarations; each one that does not goes to `errors`."""
    other = "turn" if scope == "session" else "session"
    values: dict[str, Any] = {}
    for name in sorted(given):
        decl = declared.get(name)
        if decl is None:
            errors[_variable_key(name)] = ["Not declared by the pinned version."]
            continue
        if decl.get("scope", "session") == other:
            when = "when the session starts" if other == "session" else "with each render"
            errors[f"variables.{name}"] = [f"{name!r} is {other}-scoped: give it {when}."]
            continue
        problem = value_problem(decl, given[name])
        if problem is None and scope == "session" and name == TIMEZONE_VARIABLE:
            problem = timezone_problem(given[name])
        if problem:
            errors[f"variables.{name}"] = [problem]
        else:
            values[name] = given[name]
    return values


def timezone_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "Must be an IANA time zone name such as Europe/Paris."
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"{value!r} is not an IANA time zone name (such as Europe/Paris)."
    return None


def as_text(value: Any) -> str:
    """How a value appears in text: strings as they are, everything else as JSON (true, 3.5)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def fill(prompt: str, values: dict[str, Any]) -> str:
    """`prompt` with each `{{name}}` replaced by its value (empty when the variable has none).
    Only called for content that declares variables (see the module docstring)."""
    return REFERENCE_RE.sub(lambda m: as_text(values[m.group(1)]) if m.group(1) in values else "", prompt)


# Compatibility (rows of registry.contracts.COMPATIBILITY_RULES): what a change of declarations
# or packs does to an agent that starts sessions and renders turns as it did on the old version.
COMPATIBILITY_RULES: list[tuple[str, str, str]] = [
    (
        "variable_added",
        "minor",
        "A variable was declared that is optional or has a default: every session start and render stays valid.",
    ),
    (
        "variable_added_required",
        "major",
        "A required variable without a default was declared: session starts (or renders) that do not give it "
        "are refused.",
    ),
    ("variable_removed", "major", "A variable was removed: session starts or renders that give it are refused."),
    (
        "variable_narrowed",
        "major",
        "A variable's type or scope changed, an enum lost a value, or it became required without a default: "
        "values that were accepted are refused.",
    ),
    ("variable_widened", "minor", "A variable now accepts more: an enum gained values, or it became optional."),
    ("variable_restated", "patch", "A variable's description or default changed; the same values are accepted."),
    ("knowledge_added", "minor", "A knowledge pack was listed (with the first one, the file tools appear)."),
    (
        "knowledge_removed",
        "major",
        "A knowledge pack is no longer listed: the model's paths into it fail (with the last one, the file "
        "tools go away).",
    ),
]


def _of_type(value: Any, kind: type, fallback: Any) -> Any:
    return value if isinstance(value, kind) else fallback


def _must_give(decl: dict[str, Any]) -> bool:
    return bool(decl.get("required")) and "default" not in decl


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, path, message) for each change of declarations and packs from old to new."""
    changes: list[tuple[str, str, str]] = []
    before: dict[str, Any] = _of_type(old.get("variables"), dict, {})
    after: dict[str, Any] = _of_type(new.get("variables"), dict, {})
    for name in sorted(set(before) | set(after)):
        path = f"variables.{name}"
        a: Any = before.get(name)
        b: Any = after.get(name)
        if a == b:
            continue
        if a is None and b is not None:
            kind = "variable_added_required" if _must_give(b) else "variable_added"
            changes.append((kind, path, f"Variable {name!r} was declared."))
        elif b is None or a is None:
            changes.append(("variable_removed", path, f"Variable {name!r} was removed."))
        else:
            changes.append(_variable_change(name, path, a, b))
    old_packs: list[Any] = _of_type(old.get("knowledge"), list, [])
    new_packs: list[Any] = _of_type(new.get("knowledge"), list, [])
    for pack in new_packs:
        if pack not in old_packs:
            changes.append(("knowledge_added", "knowledge", f"Knowledge pack {pack!r} is listed."))
    for pack in old_packs:
        if pack not in new_packs:
            changes.append(("knowledge_removed", "knowledge", f"Knowledge pack {pack!r} is no longer listed."))
    return changes


def _variable_change(name: str, path: str, a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str, str]:
    if a.get("type") != b.get("type") or a.get("scope", "session") != b.get("scope", "session"):
        return ("variable_narrowed", path, f"Variable {name!r} changed its type or scope.")
    if _must_give(b) and not _must_give(a):
        return ("variable_narrowed", path, f"Variable {name!r} became required.")
    old_values = {json.dumps(v) for v in a.get("values", [])}
    new_values = {json.dumps(v) for v in b.get("values", [])}
    if old_values - new_values:
        return ("variable_narrowed", path, f"Variable {name!r} lost enum values.")
    if new_values - old_values or (_must_give(a) and not _must_give(b)):
        return ("variable_widened", path, f"Variable {name!r} accepts more.")
    return ("variable_restated", path, f"Variable {name!r}'s description or default changed.")
