"""diff_contents: every change from one content document to the next, classified by
COMPATIBILITY_RULES (prompt, tools, guardrails, output schema, model, metadata)."""

from dataclasses import dataclass, replace
from typing import Any

from registry import includes, skills_content, variables
from registry.contracts.base import (
    _MISSING,
    EFFECTS,
    GUARDRAIL_KEYS,
    LEVELS,
    MODEL_IDENTITY_KEYS,
    RULE_KEYS,
    Change,
    Diff,
    _change,
    _is_effect,
    _key,
    _match_renames,
    _same,
    _tools,
    _value,
)
from registry.contracts.schema import (
    _SchemaDiff,
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
        *(_change(kind, path, message) for kind, path, message in skills_content.diff(old, new)),
        *(_change(kind, path, message) for kind, path, message in includes.diff(old, new)),
    ]
    level = max((c.level for c in changes), key=LEVELS.index, default="patch")
    return Diff(level=level, changes=changes)


def _diff_prompt(old: Any, new: Any) -> list[Change]:
    if old == new:
        return []
    if isinstance(old, str) and isinstance(new, str) and old.split() == new.split():
        return [
            _change(
                "prompt_changed",
                "system_prompt",
                f"Only the system prompt's whitespace changed (line endings, spaces or tabs; {len(old)} to "
                f"{len(new)} characters).",
            )
        ]
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


def by_severity(diff: Diff) -> Diff:
    """The same classification with its changes most severe first (stable within a level)."""
    return replace(diff, changes=sorted(diff.changes, key=lambda c: -LEVELS.index(c.level)))
