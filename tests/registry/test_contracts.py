"""Publish-time contract checks and breaking-change classification (registry.contracts).

Pure functions over normalised content documents: no database. The tables hold one case per rule
and edge, each asserting the exact kind, level and path; the hypothesis tests check the invariants
over generated documents; the realistic bundles are the ones the REST tests publish.
"""

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.canonical import TOOL_NAME_RE, canonical_bytes, normalise_content
from registry.contracts import (
    COMPATIBILITY_RULES,
    LEVELS,
    Change,
    CheckResult,
    Diff,
    Finding,
    check_content,
    diff_contents,
)
from tests.fixtures.realistic_bundles import BUNDLES

# Builders --------------------------------------------------------------------------------------------

S: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
N: dict[str, Any] = {"type": "number"}


def obj(properties: dict[str, Any], required: tuple[str, ...] | list[str] = (), **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


def arr(items: Any) -> dict[str, Any]:
    return {"type": "array", "items": items}


def tool(name: str, schema: dict[str, Any] | None = None, description: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} tool." if description is None else description,
        "input_schema": obj({}) if schema is None else schema,
    }


LOOKUP = tool("lookup_order", obj({"order_id": S}, ["order_id"]))
REFUND_SCHEMA = obj({"order_id": S, "amount": N}, ["order_id"])
REFUND = tool("process_refund", REFUND_SCHEMA, "Refund an order.")
PROMPT = "Look the order up with `lookup_order`, then call `process_refund`."


def doc(prompt: str = PROMPT, tools: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    """A normalised content document (the shape check_content and diff_contents take)."""
    return normalise_content({"system_prompt": prompt, "tools": [LOOKUP, REFUND] if tools is None else tools, **fields})


def refund(schema: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A document whose `process_refund` tool has this input_schema."""
    return doc(tools=[LOOKUP, {**REFUND, "input_schema": schema}], **fields)


def output(schema: dict[str, Any] | None) -> dict[str, Any]:
    return doc(output_schema=schema)


def guarded(guardrails: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return doc(guardrails=guardrails, **fields)


def rules(*pairs: tuple[str, str], default: str = "allow") -> dict[str, Any]:
    return {"default": default, "rules": [{"tool": t, "effect": e} for t, e in pairs]}


def unchecked(**overrides: Any) -> dict[str, Any]:
    """A document normalise_content would refuse (duplicate tools), built by hand."""
    base = doc()
    base.update(overrides)
    return base


def kinds_and_paths(diff: Diff) -> list[tuple[str, str]]:
    return [(c.kind, c.path) for c in diff.changes]


P = "tools[process_refund].input_schema"
IN = "tools[1].input_schema"

# check_content: one case per rule and edge ------------------------------------------------------------

CHECK_CASES = [
    pytest.param(doc(), None, [], [], id="a valid document"),
    pytest.param(guarded({}), None, [], [], id="empty guardrails"),
    # Prompt references
    pytest.param(doc("Call {{tool:refund_order}}."), None, ["system_prompt"], [], id="explicit ref to a missing tool"),
    pytest.param(doc("Call {{tool:process_refund}}."), None, [], [], id="explicit ref to a tool"),
    pytest.param(doc("Call {{ tool : process_refund }}."), None, [], [], id="explicit ref with spaces"),
    pytest.param(doc("Call {{tool:rembourser_é}}."), None, ["system_prompt"], [], id="explicit ref not a tool name"),
    pytest.param(doc("Call `issue_refund` now."), None, ["system_prompt"], [], id="backticked missing tool"),
    pytest.param(doc("Call `issue_refund(order_id)`."), None, ["system_prompt"], [], id="backticked call form"),
    pytest.param(doc("Then `issueRefund()`."), None, ["system_prompt"], [], id="backticked camelCase call"),
    pytest.param(doc("Ask for the `order_id` first."), None, [], [], id="backticked parameter name"),
    pytest.param(
        doc("Set `refund_status`.", output_schema=obj({"refund_status": S})), None, [], [], id="output field name"
    ),
    pytest.param(
        refund(obj({"state": {"type": "string", "enum": ["in_progress", "done"]}}), system_prompt="Use `in_progress`."),
        None,
        [],
        [],
        id="backticked enum value",
    ),
    pytest.param(
        refund(
            obj({"c": {"$ref": "#/$defs/shipping_address"}}, **{"$defs": {"shipping_address": S}}),
            system_prompt="A `shipping_address`.",
        ),
        None,
        [],
        [],
        id="backticked $defs name",
    ),
    pytest.param(doc("Read `MAX_REFUND_EUR` from the policy."), None, [], [], id="backticked constant"),
    pytest.param(doc("Call `refund` or `refund()`."), None, [], [], id="single word is not tool-shaped"),
    pytest.param(doc("Use `__init__` and `_private`."), None, [], [], id="dunder and leading underscore"),
    pytest.param(doc("See `os.path_join` and `a b_c`."), None, [], [], id="not an identifier"),
    pytest.param(doc("Example:\n```\nissue_refund(order_id)\n`issue_refund`\n```\nDone."), None, [], [], id="fence"),
    pytest.param(
        doc("Name things in `snake_case`.", metadata={"not_tools": ["snake_case"]}), None, [], [], id="allow-list"
    ),
    pytest.param(
        doc(metadata={"not_tools": "snake_case"}), None, ["metadata.not_tools"], [], id="allow-list not a list"
    ),
    pytest.param(doc(metadata={"not_tools": ["a", 3]}), None, ["metadata.not_tools[1]"], [], id="allow-list item"),
    pytest.param(
        doc("Appelez `rembourser_commandé` — merci."), None, ["system_prompt"], [], id="unicode identifier missing"
    ),
    pytest.param(
        doc("Vérifiez avec `lookup_order` puis « `process_refund` » — 日本語でも。"), None, [], [], id="unicode prompt"
    ),
    pytest.param(
        doc("Call `issue_refund`, then `issue_refund` again."), None, ["system_prompt"], [], id="one error per name"
    ),
    # Previous version: removed and renamed tools
    pytest.param(
        doc("Use `lookup_order`. Do not use process_refund.", tools=[LOOKUP]),
        doc(),
        [],
        ["system_prompt"],
        id="plain mention of a removed tool",
    ),
    pytest.param(
        doc(
            "Use `lookup_order` and `issue_refund` (formerly process_refund).",
            tools=[LOOKUP, {**REFUND, "name": "issue_refund"}],
        ),
        doc(),
        [],
        ["system_prompt"],
        id="plain mention of a renamed tool",
    ),
    pytest.param(
        doc(tools=[LOOKUP, {**REFUND, "name": "issue_refund"}]),
        doc(),
        ["system_prompt"],
        [],
        id="backticked renamed tool is an error, not also a warning",
    ),
    pytest.param(
        doc("Use `search` first.", tools=[LOOKUP]),
        doc(tools=[LOOKUP, tool("search")]),
        ["system_prompt"],
        [],
        id="backticked single-word tool the previous version had",
    ),
    pytest.param(
        doc("Use `lookup_order`; processing refunds is manual.", tools=[LOOKUP]),
        doc(),
        [],
        [],
        id="no mention of the removed tool",
    ),
    # Tools and schemas
    pytest.param(unchecked(tools=[LOOKUP, REFUND, REFUND]), None, ["tools[2].name"], [], id="duplicate tool name"),
    pytest.param(refund(obj({"amount": {"type": "money"}})), None, [f"{IN}.properties.amount.type"], [], id="bad type"),
    pytest.param(
        refund(obj({"lines": arr({"type": "sku"})})), None, [f"{IN}.properties.lines.items.type"], [], id="bad items"
    ),
    pytest.param(refund({"type": "object", "required": "order_id"}), None, [f"{IN}.required"], [], id="required"),
    pytest.param(
        refund(obj({"a": {"type": "string", "pattern": "("}})), None, [f"{IN}.properties.a.pattern"], [], id="regex"
    ),
    pytest.param(refund(obj({"type": 5})), None, [f"{IN}.properties.type"], [], id="property named type"),
    pytest.param(
        refund(obj({"a": {"type": "string", "minLength": -1}})), None, [f"{IN}.properties.a.minLength"], [], id="bound"
    ),
    pytest.param(
        output(obj({"reply": {"type": "text"}})), None, ["output_schema.properties.reply.type"], [], id="output type"
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#/$defs/Customer"}})),
        None,
        [f"{IN}.properties.c.$ref"],
        [],
        id="dangling $ref",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#/$defs/Customer"}}, **{"$defs": {"Customer": obj({"id": S})}})),
        None,
        [],
        [],
        id="resolving $ref",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#node"}}, **{"$defs": {"n": {"$anchor": "node", "type": "string"}}})),
        None,
        [],
        [],
        id="$anchor ref",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "https://example.com/customer.json"}})),
        None,
        [],
        [f"{IN}.properties.c.$ref"],
        id="remote $ref",
    ),
    pytest.param(refund({"type": "string"}), None, [], [f"{IN}.type"], id="input root not an object"),
    pytest.param(
        refund(obj({}, **{"$schema": "http://json-schema.org/draft-07/schema#"})),
        None,
        [],
        [f"{IN}.$schema"],
        id="other dialect",
    ),
    pytest.param(
        refund(obj({}, **{"$schema": "https://json-schema.org/draft/2020-12/schema"})), None, [], [], id="2020-12"
    ),
    pytest.param(refund(obj({"a": True, "b": False})), None, [], [], id="boolean subschemas"),
    # Guardrails
    pytest.param(guarded(rules(("process_refund", "confirm"))), None, [], [], id="valid guardrails"),
    pytest.param(
        guarded({"default": "deny", "fallback": "allow"}), None, ["guardrails.fallback"], [], id="unknown key"
    ),
    pytest.param(guarded({"default": "block"}), None, ["guardrails.default"], [], id="bad default"),
    pytest.param(guarded({"rules": {"process_refund": "deny"}}), None, ["guardrails.rules"], [], id="rules not a list"),
    pytest.param(guarded({"rules": ["deny"]}), None, ["guardrails.rules[0]"], [], id="rule not an object"),
    pytest.param(
        guarded({"rules": [{"tool": "process_refund", "effect": "deny", "when": "night"}]}),
        None,
        ["guardrails.rules[0].when"],
        [],
        id="rule unknown key",
    ),
    pytest.param(guarded({"rules": [{"effect": "deny"}]}), None, ["guardrails.rules[0].tool"], [], id="rule no tool"),
    pytest.param(
        guarded({"rules": [{"tool": "lookup_order", "effect": "allow"}, {"tool": "process_refund", "effect": "ask"}]}),
        None,
        ["guardrails.rules[1].effect"],
        [],
        id="rule bad effect",
    ),
    pytest.param(
        guarded(rules(("issue_refund", "deny"))), None, ["guardrails.rules[0].tool"], [], id="rule names missing tool"
    ),
    pytest.param(
        guarded(rules(("process_refund", "deny"), ("process_refund", "allow"))),
        None,
        ["guardrails.rules[1].tool"],
        [],
        id="two rules for one tool",
    ),
    pytest.param(
        guarded({"rules": [{"tool": "process_refund", "effect": "deny", "reason": 7}]}),
        None,
        ["guardrails.rules[0].reason"],
        [],
        id="rule reason not a string",
    ),
]


@pytest.mark.parametrize(("content", "previous", "errors", "warnings"), CHECK_CASES)
def test_it_checks_content(content, previous, errors, warnings):
    result = check_content(content, previous)
    assert [f.path for f in result.errors] == errors, result.errors
    assert [f.path for f in result.warnings] == warnings, result.warnings


# diff_contents: one case per rule and edge ----------------------------------------------------------------

NODE_DEFS = {"node": obj({"name": S, "children": arr({"$ref": "#/$defs/node"})})}
NODE_DEFS_INT = {"node": obj({"name": INT, "children": arr({"$ref": "#/$defs/node"})})}
ADDRESS = obj({"zip": S, "city": S}, ["zip"])

DIFF_CASES = [
    pytest.param(doc(), doc(), "patch", [], id="identical"),
    pytest.param(doc(), doc("Be brief. " + PROMPT), "patch", [("prompt_changed", "system_prompt")], id="prompt"),
    # Tools
    pytest.param(
        doc(),
        doc(tools=[LOOKUP, {**REFUND, "description": "Refund part of an order."}]),
        "patch",
        [("tool_description_changed", "tools[process_refund].description")],
        id="tool description",
    ),
    pytest.param(
        doc(), doc(tools=[LOOKUP, REFUND, tool("escalate")]), "minor", [("tool_added", "tools[escalate]")], id="add"
    ),
    pytest.param(doc(), doc(tools=[LOOKUP]), "major", [("tool_removed", "tools[process_refund]")], id="tool removed"),
    pytest.param(
        doc(),
        doc(tools=[LOOKUP, {**REFUND, "name": "issue_refund", "description": "Issue a refund."}]),
        "major",
        [
            ("tool_renamed", "tools[process_refund].name"),
            ("tool_description_changed", "tools[issue_refund].description"),
        ],
        id="renamed: same input_schema, new description",
    ),
    pytest.param(
        doc(),
        doc(
            tools=[LOOKUP, tool("issue_refund", obj({"order_id": S, "amount": INT}, ["order_id"]), "Refund an order.")]
        ),
        "major",
        [
            ("tool_renamed", "tools[process_refund].name"),
            ("parameter_type_changed", "tools[issue_refund].input_schema.properties.amount.type"),
        ],
        id="renamed: same description, schema changed",
    ),
    pytest.param(
        doc(),
        doc(tools=[LOOKUP, tool("issue_refund", obj({"order": S}), "Give money back.")]),
        "major",
        [("tool_removed", "tools[process_refund]"), ("tool_added", "tools[issue_refund]")],
        id="removed and added, not a rename",
    ),
    pytest.param(
        doc(tools=[LOOKUP, REFUND, tool("ping")]),
        doc(tools=[LOOKUP, REFUND, tool("now")]),
        "major",
        [("tool_removed", "tools[ping]"), ("tool_added", "tools[now]")],
        id="parameterless tools are not renames by schema",
    ),
    pytest.param(
        doc(tools=[LOOKUP, REFUND, tool("ping", description="Check the service.")]),
        doc(tools=[LOOKUP, REFUND, tool("health", description="Check the service.")]),
        "major",
        [("tool_renamed", "tools[ping].name")],
        id="parameterless tools renamed by description",
    ),
    pytest.param(doc(), doc(tools=[REFUND, LOOKUP]), "patch", [("tools_reordered", "tools")], id="tools reordered"),
    pytest.param(
        doc(), doc(tools=[LOOKUP, tool("escalate"), REFUND]), "minor", [("tool_added", "tools[escalate]")], id="insert"
    ),
    # Tool inputs
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": S, "b": S})),
        "minor",
        [("parameter_added_optional", f"{P}.properties.b")],
        id="parameter added optional",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": S, "b": S}, ["b"])),
        "major",
        [("parameter_added_required", f"{P}.properties.b")],
        id="parameter added required",
    ),
    pytest.param(
        refund(obj({"a": S, "b": S})),
        refund(obj({"a": S})),
        "major",
        [("parameter_removed", f"{P}.properties.b")],
        id="parameter removed",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": S}, ["a"])),
        "major",
        [("parameter_made_required", f"{P}.properties.a")],
        id="parameter made required",
    ),
    pytest.param(
        refund(obj({"a": S}, ["a"])),
        refund(obj({"a": S})),
        "minor",
        [("parameter_made_optional", f"{P}.properties.a")],
        id="parameter made optional",
    ),
    pytest.param(
        refund(obj({})),
        refund(obj({}, ["x"])),
        "major",
        [("parameter_made_required", f"{P}.properties.x")],
        id="required without a property",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": INT})),
        "major",
        [("parameter_type_changed", f"{P}.properties.a.type")],
        id="type changed",
    ),
    pytest.param(
        refund(obj({"a": INT})),
        refund(obj({"a": N})),
        "minor",
        [("parameter_type_widened", f"{P}.properties.a.type")],
        id="integer widened to number",
    ),
    pytest.param(
        refund(obj({"a": N})),
        refund(obj({"a": INT})),
        "major",
        [("parameter_type_changed", f"{P}.properties.a.type")],
        id="number narrowed to integer",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": {"type": ["string", "null"]}})),
        "minor",
        [("parameter_type_widened", f"{P}.properties.a.type")],
        id="made nullable",
    ),
    pytest.param(
        refund(obj({"a": {"type": ["string", "null"]}})),
        refund(obj({"a": {"type": ["null", "string"]}})),
        "patch",
        [("input_schema_rewritten", P)],
        id="type list reordered",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": {}})),
        "minor",
        [("parameter_type_widened", f"{P}.properties.a.type")],
        id="type dropped",
    ),
    pytest.param(
        refund(obj({"a": obj({"x": S}, ["x"])})),
        refund(obj({"a": S})),
        "major",
        [("parameter_type_changed", f"{P}.properties.a.type")],
        id="object to string: no noise below",
    ),
    pytest.param(
        refund(obj({"addr": ADDRESS})),
        refund(obj({"addr": obj({"zip": INT, "city": S}, ["zip"])})),
        "major",
        [("parameter_type_changed", f"{P}.properties.addr.properties.zip.type")],
        id="nested type changed",
    ),
    pytest.param(
        refund(obj({"addr": ADDRESS})),
        refund(obj({"addr": obj({"zip": S, "city": S, "country": S}, ["zip", "country"])})),
        "major",
        [("parameter_added_required", f"{P}.properties.addr.properties.country")],
        id="nested required added",
    ),
    pytest.param(
        refund(obj({"lines": arr(S)})),
        refund(obj({"lines": arr(INT)})),
        "major",
        [("parameter_type_changed", f"{P}.properties.lines.items.type")],
        id="array item type",
    ),
    pytest.param(
        refund(obj({"lines": arr(obj({"sku": S, "qty": INT}))})),
        refund(obj({"lines": arr(obj({"sku": S}))})),
        "major",
        [("parameter_removed", f"{P}.properties.lines.items.properties.qty")],
        id="array of objects: property removed",
    ),
    pytest.param(
        refund(obj({"grid": arr(arr(INT))})),
        refund(obj({"grid": arr(arr(N))})),
        "minor",
        [("parameter_type_widened", f"{P}.properties.grid.items.items.type")],
        id="nested arrays",
    ),
    pytest.param(
        refund(obj({"lines": {"type": "array"}})),
        refund(obj({"lines": arr(S)})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.lines.items")],
        id="items added",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#/$defs/C"}}, **{"$defs": {"C": obj({"id": S})}})),
        refund(obj({"c": {"$ref": "#/$defs/C"}}, **{"$defs": {"C": obj({"id": INT})}})),
        "major",
        [("parameter_type_changed", f"{P}.properties.c.properties.id.type")],
        id="$ref target changed, reported where used",
    ),
    pytest.param(
        refund(obj({"c": obj({"id": S})})),
        refund(obj({"c": {"$ref": "#/$defs/C"}}, **{"$defs": {"C": obj({"id": S})}})),
        "patch",
        [("input_schema_rewritten", P)],
        id="inlined schema moved to $defs",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#/$defs/C"}}, **{"$defs": {"C": S}})),
        refund(obj({"c": {"$ref": "#/$defs/C", "description": "The customer."}}, **{"$defs": {"C": S}})),
        "patch",
        [("input_schema_annotation_changed", f"{P}.properties.c.description")],
        id="$ref sibling annotation",
    ),
    pytest.param(
        refund(obj({"tree": {"$ref": "#/$defs/node"}}, **{"$defs": NODE_DEFS})),
        refund(obj({"tree": {"$ref": "#/$defs/node"}}, **{"$defs": NODE_DEFS_INT})),
        "major",
        [("parameter_type_changed", f"{P}.properties.tree.properties.name.type")],
        id="recursive $ref",
    ),
    pytest.param(
        refund(obj({"tree": {"$ref": "#"}, "name": S})),
        refund(obj({"tree": {"$ref": "#"}, "name": INT})),
        "major",
        [("parameter_type_changed", f"{P}.properties.name.type")],
        id="$ref to the root",
    ),
    pytest.param(
        refund(obj({"from": {"$ref": "#/$defs/A"}, "to": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": ADDRESS}})),
        refund(
            obj(
                {"from": {"$ref": "#/$defs/A"}, "to": {"$ref": "#/$defs/A"}},
                **{"$defs": {"A": obj({"zip": S}, ["zip"])}},
            )
        ),
        "major",
        [("parameter_removed", f"{P}.properties.from.properties.city")],
        id="shared $ref target: reported once, where first used",
    ),
    pytest.param(
        refund(obj({"from": {"$ref": "#/$defs/A"}, "to": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": ADDRESS}})),
        refund(obj({"from": {"$ref": "#/$defs/B"}, "to": {"$ref": "#/$defs/B"}}, **{"$defs": {"B": ADDRESS}})),
        "patch",
        [("input_schema_rewritten", P)],
        id="$defs entry renamed",
    ),
    pytest.param(
        refund(obj({"c": {"$ref": "#/$defs/C"}}, **{"$defs": {"C": obj({"a": {"$ref": "#/$defs/A"}}), "A": ADDRESS}})),
        refund(
            obj(
                {"c": {"$ref": "#/$defs/C"}},
                **{"$defs": {"C": obj({"a": {"$ref": "#/$defs/A"}}), "A": obj({"zip": INT, "city": S}, ["zip"])}},
            )
        ),
        "major",
        [("parameter_type_changed", f"{P}.properties.c.properties.a.properties.zip.type")],
        id="$ref through another $ref",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "enum": ["a", "b"]}})),
        refund(obj({"s": {"type": "string", "enum": ["a"]}})),
        "major",
        [("enum_narrowed", f"{P}.properties.s.enum")],
        id="enum narrowed",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "enum": ["a"]}})),
        refund(obj({"s": {"type": "string", "enum": ["a", "b"]}})),
        "minor",
        [("enum_widened", f"{P}.properties.s.enum")],
        id="enum widened",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "enum": ["a", "b"]}})),
        refund(obj({"s": {"type": "string", "enum": ["a", "c"]}})),
        "major",
        [("enum_narrowed", f"{P}.properties.s.enum")],
        id="enum value replaced",
    ),
    pytest.param(
        refund(obj({"s": S})),
        refund(obj({"s": {"type": "string", "enum": ["a"]}})),
        "major",
        [("enum_narrowed", f"{P}.properties.s.enum")],
        id="enum added",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "enum": ["a"]}})),
        refund(obj({"s": S})),
        "minor",
        [("enum_widened", f"{P}.properties.s.enum")],
        id="enum dropped",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "enum": ["a", "b"]}})),
        refund(obj({"s": {"type": "string", "enum": ["b", "a"]}})),
        "patch",
        [("input_schema_rewritten", P)],
        id="enum reordered",
    ),
    pytest.param(
        refund(obj({"v": {"const": 1}})),
        refund(obj({"v": {"const": True}})),
        "major",
        [("enum_narrowed", f"{P}.properties.v.const")],
        id="const 1 is not const true",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "maxLength": 10}})),
        refund(obj({"s": {"type": "string", "maxLength": 5}})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.s.maxLength")],
        id="maxLength decreased",
    ),
    pytest.param(
        refund(obj({"n": {"type": "number", "minimum": 1}})),
        refund(obj({"n": {"type": "number", "minimum": 0}})),
        "minor",
        [("parameter_constraint_loosened", f"{P}.properties.n.minimum")],
        id="minimum decreased",
    ),
    pytest.param(
        refund(obj({"n": N})),
        refund(obj({"n": {"type": "number", "exclusiveMinimum": 0}})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.n.exclusiveMinimum")],
        id="bound added",
    ),
    pytest.param(
        refund(obj({"n": {"type": "number", "multipleOf": 0.3}})),
        refund(obj({"n": {"type": "number", "multipleOf": 0.1}})),
        "minor",
        [("parameter_constraint_loosened", f"{P}.properties.n.multipleOf")],
        id="multipleOf divides the old step",
    ),
    pytest.param(
        refund(obj({"s": S})),
        refund(obj({"s": {"type": "string", "pattern": "^ORD-"}})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.s.pattern")],
        id="pattern added",
    ),
    pytest.param(
        refund(obj({"s": {"type": "string", "format": "email"}})),
        refund(obj({"s": S})),
        "minor",
        [("parameter_constraint_loosened", f"{P}.properties.s.format")],
        id="format dropped",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": S}, additionalProperties=False)),
        "major",
        [("parameter_constraint_tightened", f"{P}.additionalProperties")],
        id="additionalProperties closed",
    ),
    pytest.param(
        refund(obj({"a": S}, additionalProperties=False)),
        refund(obj({"a": S})),
        "minor",
        [("parameter_constraint_loosened", f"{P}.additionalProperties")],
        id="additionalProperties opened",
    ),
    pytest.param(
        refund(obj({"a": {"anyOf": [S, INT]}})),
        refund(obj({"a": {"anyOf": [S, INT, {"type": "null"}]}})),
        "minor",
        [("parameter_constraint_loosened", f"{P}.properties.a.anyOf")],
        id="anyOf branch added",
    ),
    pytest.param(
        refund(obj({"a": {"anyOf": [S, INT]}})),
        refund(obj({"a": {"anyOf": [S]}})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.a.anyOf")],
        id="anyOf branch removed",
    ),
    pytest.param(
        refund(obj({"a": {"oneOf": [S, obj({"x": S})]}})),
        refund(obj({"a": {"oneOf": [S, obj({"x": INT})]}})),
        "major",
        [("parameter_type_changed", f"{P}.properties.a.oneOf[1].properties.x.type")],
        id="oneOf branch changed",
    ),
    pytest.param(
        refund(obj({"a": True})),
        refund(obj({"a": False})),
        "major",
        [("parameter_constraint_tightened", f"{P}.properties.a.not")],
        id="boolean schema true to false",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": {"type": "string", "description": "Why."}})),
        "patch",
        [("input_schema_annotation_changed", f"{P}.properties.a.description")],
        id="annotation",
    ),
    pytest.param(
        refund(obj({"a": S, "b": S}, ["a", "b"])),
        refund(obj({"a": S, "b": S}, ["b", "a"])),
        "patch",
        [("input_schema_rewritten", P)],
        id="required reordered",
    ),
    pytest.param(
        refund(obj({"prénom": S})),
        refund(obj({"prénom": INT})),
        "major",
        [("parameter_type_changed", f"{P}.properties.prénom.type")],
        id="unicode property name",
    ),
    pytest.param(
        refund(obj({"a.b": S, "c": S})),
        refund(obj({"c": S})),
        "major",
        [("parameter_removed", f'{P}.properties["a.b"]')],
        id="property name with a dot",
    ),
    pytest.param(
        refund(obj({"a": S})),
        refund(obj({"a": S}, dependentRequired={"a": ["b"]})),
        "major",
        [("input_schema_changed", f"{P}.dependentRequired")],
        id="keyword the registry does not model",
    ),
    # Output schema
    pytest.param(
        output(obj({"reply": S})),
        output(obj({"reply": S, "mood": S})),
        "minor",
        [("output_property_added", "output_schema.properties.mood")],
        id="output property added",
    ),
    pytest.param(
        output(obj({"reply": S, "mood": S})),
        output(obj({"reply": S})),
        "major",
        [("output_property_removed", "output_schema.properties.mood")],
        id="output property removed",
    ),
    pytest.param(
        output(obj({"reply": S})),
        output(obj({"reply": S, "mood": S}, ["mood"])),
        "major",
        [("output_required_added", "output_schema.properties.mood")],
        id="output required field added",
    ),
    pytest.param(
        output(obj({"reply": S})),
        output(obj({"reply": S}, ["reply"])),
        "major",
        [("output_required_added", "output_schema.properties.reply")],
        id="output field made required",
    ),
    pytest.param(
        output(obj({"reply": S}, ["reply"])),
        output(obj({"reply": S})),
        "minor",
        [("output_required_removed", "output_schema.properties.reply")],
        id="output field made optional",
    ),
    pytest.param(
        output(obj({"s": {"enum": ["ok", "failed"]}})),
        output(obj({"s": {"enum": ["ok"]}})),
        "major",
        [("output_enum_narrowed", "output_schema.properties.s.enum")],
        id="output enum narrowed",
    ),
    pytest.param(
        output(obj({"s": {"enum": ["ok"]}})),
        output(obj({"s": {"enum": ["ok", "failed"]}})),
        "minor",
        [("output_enum_widened", "output_schema.properties.s.enum")],
        id="output enum widened",
    ),
    pytest.param(
        output(obj({"n": INT})),
        output(obj({"n": N})),
        "minor",
        [("output_type_widened", "output_schema.properties.n.type")],
        id="output type widened",
    ),
    pytest.param(
        output(obj({"n": S})),
        output(obj({"n": INT})),
        "major",
        [("output_type_changed", "output_schema.properties.n.type")],
        id="output type changed",
    ),
    pytest.param(
        output(obj({"items": arr(obj({"id": S}))})),
        output(obj({"items": arr(obj({"id": INT}))})),
        "major",
        [("output_type_changed", "output_schema.properties.items.items.properties.id.type")],
        id="output nested",
    ),
    pytest.param(
        output(obj({"r": {"type": "string", "maxLength": 200}})),
        output(obj({"r": {"type": "string", "maxLength": 100}})),
        "major",
        [("output_schema_narrowed", "output_schema.properties.r.maxLength")],
        id="output constraint tightened",
    ),
    pytest.param(doc(), output(obj({"reply": S})), "major", [("output_schema_added", "output_schema")], id="+output"),
    pytest.param(output(obj({"reply": S})), doc(), "major", [("output_schema_removed", "output_schema")], id="-output"),
    pytest.param(
        output(obj({"reply": S})),
        output(obj({"reply": S}, title="Reply")),
        "patch",
        [("output_schema_annotation_changed", "output_schema.title")],
        id="output annotation",
    ),
    # Guardrails
    pytest.param(
        guarded(rules(("process_refund", "allow"))),
        guarded(rules(("process_refund", "confirm"))),
        "major",
        [("guardrail_tightened", "guardrails.rules[process_refund].effect")],
        id="allow to confirm",
    ),
    pytest.param(
        guarded(rules(("process_refund", "confirm"))),
        guarded(rules(("process_refund", "deny"))),
        "major",
        [("guardrail_tightened", "guardrails.rules[process_refund].effect")],
        id="confirm to deny",
    ),
    pytest.param(
        guarded(rules(("process_refund", "deny"))),
        guarded(rules(("process_refund", "confirm"))),
        "minor",
        [("guardrail_loosened", "guardrails.rules[process_refund].effect")],
        id="deny to confirm",
    ),
    pytest.param(
        guarded({}),
        guarded({"default": "confirm"}),
        "major",
        [("guardrail_tightened", "guardrails.default")],
        id="default tightened, reported once",
    ),
    pytest.param(
        guarded(rules(("process_refund", "confirm"), default="deny")),
        guarded(rules(("process_refund", "confirm"), default="allow")),
        "minor",
        [("guardrail_loosened", "guardrails.default")],
        id="default loosened",
    ),
    pytest.param(
        guarded({}),
        guarded(rules(("process_refund", "deny"))),
        "major",
        [("guardrail_tightened", "guardrails.rules[process_refund].effect")],
        id="tightening rule added",
    ),
    pytest.param(
        guarded(rules(("process_refund", "confirm"))),
        guarded({}),
        "minor",
        [("guardrail_loosened", "guardrails.rules[process_refund].effect")],
        id="rule removed",
    ),
    pytest.param(
        guarded({"rules": [{"tool": "process_refund", "effect": "confirm", "reason": "Money."}]}),
        guarded({"rules": [{"tool": "process_refund", "effect": "confirm", "reason": "Money leaves."}]}),
        "patch",
        [("guardrail_restated", "guardrails.rules[process_refund]")],
        id="rule reason changed",
    ),
    pytest.param(
        guarded({}),
        guarded({"default": "allow"}),
        "patch",
        [("guardrail_restated", "guardrails")],
        id="explicit default",
    ),
    pytest.param(
        guarded(rules(("process_refund", "confirm"))),
        doc(tools=[LOOKUP, {**REFUND, "name": "issue_refund"}], guardrails=rules(("issue_refund", "confirm"))),
        "major",
        [("tool_renamed", "tools[process_refund].name")],
        id="rule follows a renamed tool",
    ),
    pytest.param(
        guarded(rules(("process_refund", "allow"))),
        doc(tools=[LOOKUP, {**REFUND, "name": "issue_refund"}], guardrails=rules(("issue_refund", "deny"))),
        "major",
        [
            ("tool_renamed", "tools[process_refund].name"),
            ("guardrail_tightened", "guardrails.rules[issue_refund].effect"),
        ],
        id="renamed tool's rule tightened",
    ),
    pytest.param(
        guarded({"process_refund": "deny"}),
        guarded({"process_refund": "allow"}),
        "major",
        [("guardrails_changed", "guardrails")],
        id="guardrails outside the documented structure",
    ),
    # Model and metadata
    pytest.param(
        doc(model={"name": "m-1"}), doc(model={"name": "m-2"}), "minor", [("model_changed", "model.name")], id="model"
    ),
    pytest.param(
        doc(model={"name": "m-1", "temperature": 0}),
        doc(model={"name": "m-1", "temperature": 0.5}),
        "patch",
        [("model_parameter_changed", "model.temperature")],
        id="temperature",
    ),
    pytest.param(
        doc(model={"temperature": 0}),
        doc(model={"temperature": False}),
        "patch",
        [("model_parameter_changed", "model.temperature")],
        id="0 is not false",
    ),
    pytest.param(
        doc(metadata={"owner": "a"}),
        doc(metadata={"owner": "b", "ticket": "X-1"}),
        "patch",
        [("metadata_changed", "metadata.owner"), ("metadata_changed", "metadata.ticket")],
        id="metadata",
    ),
    # The level is the highest change
    pytest.param(
        doc(),
        doc("New wording.", tools=[{**LOOKUP, "description": "Find."}, REFUND, tool("escalate")], model={"name": "x"}),
        "minor",
        [
            ("prompt_changed", "system_prompt"),
            ("tool_description_changed", "tools[lookup_order].description"),
            ("tool_added", "tools[escalate]"),
            ("model_changed", "model.name"),
        ],
        id="level is the highest",
    ),
]


@pytest.mark.parametrize(("old", "new", "level", "changes"), DIFF_CASES)
def test_it_classifies_changes(old, new, level, changes):
    diff = diff_contents(old, new)
    assert kinds_and_paths(diff) == changes, diff.changes
    assert diff.level == level
    assert all(c.level == dict((k, lv) for k, lv, _ in COMPATIBILITY_RULES)[c.kind] for c in diff.changes)


# Messages a prompt engineer can act on --------------------------------------------------------------------


def test_it_says_where_a_missing_tool_is_referenced_and_suggests_a_name():
    result = check_content(doc("Be kind.\nThen call `proces_refund`."))
    assert result.errors == [
        Finding(
            "system_prompt",
            "The prompt references `proces_refund` (line 2, column 11), but the bundle has no tool of that name "
            "(did you mean `process_refund`?); fix the name or add the tool "
            "(if it is not a tool, list it in metadata.not_tools).",
        )
    ]


def test_it_counts_columns_in_characters_not_bytes():
    [error] = check_content(doc("日本語 — `issue_refund`")).errors
    assert "(line 1, column 7)" in error.message


def test_it_names_the_new_tool_when_the_prompt_calls_a_renamed_one():
    renamed = doc(tools=[LOOKUP, {**REFUND, "name": "issue_refund"}])
    [error] = check_content(renamed, previous=doc()).errors
    assert "`process_refund` (line 1, column 50), which this version renames to `issue_refund`" in error.message


def test_it_warns_about_a_removed_tool_with_its_place():
    [warning] = check_content(doc("Use `lookup_order`.\nNo process_refund.", tools=[LOOKUP]), doc()).warnings
    assert warning.message.startswith("The prompt still mentions `process_refund` (line 2, column 4)")
    assert "removes" in warning.message


def test_it_explains_a_bad_schema_type_with_the_allowed_types():
    [error] = check_content(refund(obj({"amount": {"type": "money"}}))).errors
    assert error == Finding(
        f"{IN}.properties.amount.type",
        "`type` must be one of array, boolean, integer, null, number, object or string, or a list of them; "
        'got "money".',
    )


def test_it_explains_a_breaking_input_change_from_the_agents_side():
    [change] = diff_contents(refund(obj({"a": S})), refund(obj({"a": INT}))).changes
    assert change == Change(
        level="major",
        kind="parameter_type_changed",
        path=f"{P}.properties.a.type",
        message="Parameter `a` of tool `process_refund` changed type from string to integer; "
        "calls the agent plans against the previous version can be rejected.",
        tool="process_refund",
    )


def test_it_names_nested_parameters_by_their_chain():
    [change] = diff_contents(
        refund(obj({"lines": arr(obj({"sku": S}))})), refund(obj({"lines": arr(obj({"sku": INT}))}))
    ).changes
    assert change.message.startswith("Parameter `lines[].sku` of tool `process_refund` changed type")


def test_it_explains_a_tightened_guardrail():
    [change] = diff_contents(guarded({}), guarded(rules(("process_refund", "deny")))).changes
    assert change.message == (
        "Tool `process_refund` tightened from allow to deny; calls the agent plans will now be refused."
    )
    assert change.tool == "process_refund"


def test_it_marks_output_changes_with_no_tool():
    [change] = diff_contents(output(obj({"a": S})), output(obj({}))).changes
    assert change.tool is None
    assert change.message.startswith("Output field `a` was removed; output valid under the previous version")


def test_it_reports_a_too_deep_schema_instead_of_crashing():
    deep: dict[str, Any] = S
    for _ in range(40):
        deep = obj({"x": deep})
    [error] = check_content(refund(deep)).errors
    assert error.path == IN and "deeper than 64 levels" in error.message
    assert diff_contents(refund(deep), refund(obj({}))).level == "major"


def test_it_compares_fanned_out_refs_in_linear_time():
    # 2**40 paths lead to d0; each pair of $refs is expanded once.
    defs: dict[str, Any] = {"d0": obj({"leaf": S})}
    for i in range(1, 40):
        defs[f"d{i}"] = obj({"a": {"$ref": f"#/$defs/d{i - 1}"}, "b": {"$ref": f"#/$defs/d{i - 1}"}})
    before = obj({"root": {"$ref": "#/$defs/d39"}}, **{"$defs": defs})
    after = copy.deepcopy(before)
    after["$defs"]["d0"]["properties"]["leaf"] = INT
    [change] = diff_contents(refund(before), refund(after)).changes
    assert change.kind == "parameter_type_changed"
    assert change.path == f"{P}.properties.root" + ".properties.a" * 39 + ".properties.leaf.type"


def test_it_stops_at_a_ref_cycle():
    looped = obj({"a": {"$ref": "#/$defs/a"}}, **{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}})
    assert check_content(refund(looped)).errors == []
    assert diff_contents(refund(looped), refund(obj({"a": S}))).level == "major"


# The rules table -------------------------------------------------------------------------------------------


def test_the_rules_table_has_one_row_per_kind_with_a_known_level():
    kinds = [kind for kind, _, _ in COMPATIBILITY_RULES]
    assert len(kinds) == len(set(kinds))
    assert all(level in LEVELS for _, level, _ in COMPATIBILITY_RULES)
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", kind) for kind in kinds)
    assert all(rule.endswith(".") for _, _, rule in COMPATIBILITY_RULES)


def test_the_issue_s_examples_have_the_levels_it_names():
    levels = {kind: level for kind, level, _ in COMPATIBILITY_RULES}
    assert levels["prompt_changed"] == "patch"
    assert {levels[k] for k in ("tool_added", "parameter_added_optional", "output_schema_widened")} == {"minor"}
    breaking = (
        "tool_removed",
        "tool_renamed",
        "parameter_added_required",
        "parameter_type_changed",
        "output_schema_narrowed",
        "output_required_added",
        "guardrail_tightened",
    )
    assert {levels[k] for k in breaking} == {"major"}


def test_results_are_frozen_values():
    result = check_content(doc())
    assert result == CheckResult(errors=[], warnings=[])
    with pytest.raises(AttributeError):
        result.errors = []  # type: ignore[misc]


# Realistic bundles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_realistic_bundles(name):
    case = BUNDLES[name]
    before, after = normalise_content(case["before"]), normalise_content(case["after"])
    assert check_content(before) == CheckResult(errors=[], warnings=[])
    result = check_content(after, previous=before)
    assert [f.path for f in result.errors] == case["errors"], result.errors
    assert [f.path for f in result.warnings] == case["warnings"], result.warnings
    diff = diff_contents(before, after)
    assert [{"kind": c.kind, "path": c.path} for c in diff.changes] == case["changes"], diff.changes
    assert diff.level == case["level"]


# Text that can be content: no lone surrogates (UTF-8 cannot encode them; publishing refuses them).
UNICODE = st.characters(exclude_categories=("Cs",))


# Properties --------------------------------------------------------------------------------------------------

PROPERTY_NAMES = st.from_regex(r"[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,4})?", fullmatch=True)
TOOL_NAMES = st.from_regex(TOOL_NAME_RE.pattern.replace("{0,63}", "{0,12}").rstrip("$") + r"\Z")
EFFECT = st.sampled_from(["allow", "confirm", "deny"])
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(UNICODE, max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(UNICODE, max_size=4), inner, max_size=3),
    max_leaves=6,
)
LEAVES = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "boolean"}),
    st.just({"type": ["number", "null"]}),
    st.integers(-5, 5).map(lambda n: {"type": "integer", "minimum": n}),
    st.lists(st.text(UNICODE, max_size=4), min_size=1, max_size=3, unique=True).map(
        lambda v: {"type": "string", "enum": v}
    ),
)


def objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def with_required(properties: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        names = st.lists(st.sampled_from(sorted(properties)), unique=True) if properties else st.just([])
        return names.map(lambda required: obj(properties, required))

    return st.dictionaries(PROPERTY_NAMES, children, max_size=4).flatmap(with_required)


SCHEMAS = st.recursive(LEAVES, lambda inner: objects(inner) | inner.map(arr), max_leaves=8)


@st.composite
def policies(draw: st.DrawFn, tools: list[str]) -> dict[str, Any]:
    """Valid guardrails over these tools, or {}."""
    if draw(st.booleans()):
        return {}
    ruled = draw(st.lists(st.sampled_from(tools), unique=True)) if tools else []
    return {"default": draw(EFFECT), "rules": [{"tool": t, "effect": draw(EFFECT)} for t in ruled]}


@st.composite
def documents(draw: st.DrawFn, min_tools: int = 0) -> dict[str, Any]:
    """A valid, normalised content document whose prompt references some of its tools."""
    names = draw(st.lists(TOOL_NAMES, min_size=min_tools, max_size=4, unique=True))
    tools = [tool(name, draw(objects(SCHEMAS)), draw(st.text(UNICODE, max_size=10))) for name in names]
    words = draw(st.text(st.characters(exclude_characters="`{}", exclude_categories=("Cs",)), min_size=1, max_size=40))
    mentioned = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
    prompt = words + "".join(f" Call `{n}`." for n in mentioned)
    guardrails = draw(policies(names))
    return normalise_content(
        {
            "system_prompt": prompt,
            "tools": tools,
            "guardrails": guardrails,
            "output_schema": draw(st.none() | objects(SCHEMAS)),
            "model": draw(
                st.fixed_dictionaries({"name": st.sampled_from(["m-1", "m-2"]), "temperature": st.floats(0, 1)})
            ),
            "metadata": draw(st.dictionaries(st.text(UNICODE, max_size=4), JSON, max_size=2)),
        }
    )


def object_nodes(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object schema reachable through properties and items, with its path."""
    found = [(path, schema)] if schema.get("type") == "object" else []
    for name, sub in schema.get("properties", {}).items():
        found += object_nodes(sub, f"{path}.properties.{name}")
    if isinstance(schema.get("items"), dict):
        found += object_nodes(schema["items"], f"{path}.items")
    return found


PROPERTY_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(documents())
def test_a_document_against_itself_is_an_empty_patch(content):
    assert diff_contents(content, copy.deepcopy(content)) == Diff(level="patch", changes=[])


@PROPERTY_SETTINGS
@given(documents())
def test_a_generated_document_passes_the_checks(content):
    assert check_content(content, previous=content).errors == []


@PROPERTY_SETTINGS
@given(documents(min_tools=1), st.data())
def test_adding_a_required_input_field_anywhere_is_major(content, data):
    changed = copy.deepcopy(content)
    target = data.draw(st.sampled_from(changed["tools"]))
    path, node = data.draw(
        st.sampled_from(object_nodes(target["input_schema"], f"tools[{target['name']}].input_schema"))
    )
    field = data.draw(PROPERTY_NAMES.filter(lambda n: n not in node["properties"]))
    node["properties"][field] = data.draw(SCHEMAS)
    node["required"] = [*node.get("required", []), field]
    diff = diff_contents(content, changed)
    assert diff.level == "major"
    assert ("parameter_added_required", f"{path}.properties.{field}") in kinds_and_paths(diff)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A document and a copy with one random edit, possibly leaving a schema invalid."""
    old = draw(documents(min_tools=1))
    new = copy.deepcopy(old)
    section = draw(
        st.sampled_from(["prompt", "schema", "schema", "rename", "output", "guardrails", "model", "metadata"])
    )
    if section in ("schema", "rename") and new["tools"]:
        target = draw(st.sampled_from(new["tools"]))
        if section == "rename":
            target["name"] = draw(TOOL_NAMES.filter(lambda n: n not in {t["name"] for t in new["tools"]}))
        else:
            edit_random_node(draw, target["input_schema"])
    elif section == "output" and new["output_schema"] is not None:
        edit_random_node(draw, new["output_schema"])
    elif section == "guardrails" and draw(st.booleans()):
        new["guardrails"] = draw(policies([t["name"] for t in new["tools"]]))
    elif section in ("guardrails", "model", "metadata"):
        new[section] = draw(st.dictionaries(st.sampled_from(["default", "rules", "name", "x"]), JSON, max_size=2))
    else:
        new["system_prompt"] = draw(st.sampled_from([old["system_prompt"], old["system_prompt"] + "!"]))
    return old, new


def edit_random_node(draw: st.DrawFn, schema: dict[str, Any]) -> None:
    nodes = [schema]
    for node in nodes:  # breadth-first over every JSON object in the schema
        nodes += [v for v in node.values() if isinstance(v, dict)]
        nodes += [v for lst in node.values() if isinstance(lst, list) for v in lst if isinstance(v, dict)]
    node = draw(st.sampled_from(nodes))
    keys = ["type", "enum", "required", "minimum", "items", "additionalProperties", "description", "$ref", "anyOf"]
    key = draw(st.sampled_from(sorted({*node, *keys})))
    if draw(st.booleans()):
        node.pop(key, None)
    else:
        node[key] = draw(JSON | SCHEMAS)


@PROPERTY_SETTINGS
@given(mutated())
def test_a_diff_is_empty_exactly_when_the_canonical_content_is_equal(pair):
    old, new = pair
    diff = diff_contents(old, new)
    assert bool(diff.changes) == (canonical_bytes(old) != canonical_bytes(new))
    assert diff.level == max((c.level for c in diff.changes), key=LEVELS.index, default="patch")
    check_content(new, previous=old)  # never raises, whatever the edit left behind
