"""Schema compatibility: two versions of one JSON Schema (a tool's input or the output) compared
from the BACKWARD side, as the package docstring describes."""

import json
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from registry.contracts.base import (
    _MISSING,
    MAX_SCHEMA_DEPTH,
    Change,
    _anchors,
    _canon,
    _change,
    _key,
    _pointer,
    _value,
)

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


def _admits(types: frozenset[str], other: Iterable[str]) -> bool:
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
            old_ref, new_ref = old.get("$ref"), new.get("$ref")
            if isinstance(old_ref, str) and isinstance(new_ref, str):
                pair = (old_ref, new_ref)
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
