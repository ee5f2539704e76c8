"""The suite document: validation and canonical bytes (docs/evals.md).

    {"items": [{"id": "refund-1",
                "input": {"messages": [...], "variables": {...}, "turn_variables": {...}},
                "expect": [{"type": "contains", "value": "refund"}, ...],
                "tags": ["refunds"]}]}

Canonical bytes are the bundle's rule (registry.canonical.canonical_bytes), so a suite's hash
means the same thing a version's does; line endings are `\\n` before hashing."""

import json
import re
from collections.abc import Callable
from typing import Any

from core.errors import InvalidContent
from evals import scorers
from registry.canonical import canonical_bytes, content_hash

MAX_ITEMS = 1_000
MAX_EXPECT = 20
MAX_TAGS = 20
MAX_MESSAGES = 200
MAX_CANONICAL_BYTES = 4 << 20
ITEM_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$"
TAG_RE = r"^[a-z0-9][a-z0-9._-]{0,39}$"
ITEM_KEYS = {"id", "input", "expect", "tags"}
INPUT_KEYS = {"messages", "variables", "turn_variables"}


def _lf(value: Any) -> Any:
    """Every string with `\\n` line endings, at every depth: equal text is equal bytes."""
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\r", "\n")
    if isinstance(value, list):
        return [_lf(v) for v in value]
    if isinstance(value, dict):
        return {k: _lf(v) for k, v in value.items()}
    return value


def _input_errors(where: str, given: Any, err: Callable[[str, str], None]) -> dict[str, Any]:
    if not isinstance(given, dict) or set(given) - INPUT_KEYS:
        err(f"{where}.input", f"An object with {', '.join(sorted(INPUT_KEYS))}.")
        return {}
    messages = given.get("messages")
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        err(f"{where}.input.messages", f"A list of 1 to {MAX_MESSAGES} messages.")
    elif not all(isinstance(m, dict) for m in messages):
        err(f"{where}.input.messages", "Each message is an object.")
    for scope in ("variables", "turn_variables"):
        if scope in given and not isinstance(given[scope], dict):
            err(f"{where}.input.{scope}", "An object of name: value.")
    return given


def _expect_errors(where: str, expect: Any, err: Callable[[str, str], None]) -> list[Any]:
    if not isinstance(expect, list) or not expect or len(expect) > MAX_EXPECT:
        err(f"{where}.expect", f"A list of 1 to {MAX_EXPECT} expectations.")
        return []
    for position, expectation in enumerate(expect):
        problem = scorers.problem(expectation)
        if problem:
            err(f"{where}.expect[{position}]", problem)
    return expect


def _tags(where: str, tags: Any, err: Callable[[str, str], None]) -> list[str]:
    if (
        not isinstance(tags, list)
        or len(tags) > MAX_TAGS
        or not all(isinstance(t, str) and re.fullmatch(TAG_RE, t) for t in tags)
    ):
        err(f"{where}.tags", f"At most {MAX_TAGS} tags, each matching {TAG_RE}.")
        return []
    return sorted(set(tags))


def _item_errors(index: int, item: Any, seen: set[str], errors: dict[str, list[str]]) -> dict[str, Any] | None:
    where = f"items[{index}]"

    def err(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    if not isinstance(item, dict):
        err(where, "An object with input and expect.")
        return None
    for key in sorted(set(item) - ITEM_KEYS):
        err(f"{where}.{key}", f"Unknown field; an item has {', '.join(sorted(ITEM_KEYS))}.")
    item_id = item.get("id", f"item-{index + 1}")
    if not isinstance(item_id, str) or not re.fullmatch(ITEM_ID_RE, item_id):
        err(f"{where}.id", f"Must match {ITEM_ID_RE}.")
    elif item_id in seen:
        err(f"{where}.id", f"{item_id!r} is used by an earlier item.")
    else:
        seen.add(item_id)
    given = _input_errors(where, item.get("input"), err)
    expect = _expect_errors(where, item.get("expect"), err)
    return {"id": item_id, "input": given, "expect": expect, "tags": _tags(where, item.get("tags", []), err)}


def canonicalise(content: Any) -> tuple[dict[str, Any], bytes, str]:
    """Validate a suite document; return it normalised, its canonical bytes and their hash, or
    raise InvalidContent listing every problem."""
    errors: dict[str, list[str]] = {}
    if not isinstance(content, dict) or set(content) - {"items", "description"}:
        raise InvalidContent("A suite is an object with `items` (and an optional `description`).", {})
    content = _lf(content)
    items = content.get("items")
    if not isinstance(items, list) or not items or len(items) > MAX_ITEMS:
        raise InvalidContent("The suite is not valid; see details.", {"items": [f"A list of 1 to {MAX_ITEMS} items."]})
    seen: set[str] = set()
    normal = [_item_errors(i, item, seen, errors) for i, item in enumerate(items)]
    description = content.get("description", "")
    if not isinstance(description, str) or len(description) > 2_000:
        errors.setdefault("description", []).append("Text of at most 2,000 characters.")
    if errors:
        raise InvalidContent("The suite is not valid; see details.", errors)
    doc: dict[str, Any] = {"items": normal}
    if description:
        doc["description"] = description
    try:
        canonical = canonical_bytes(doc)
    except ValueError as exc:  # NaN or infinity somewhere in an input
        raise InvalidContent("The suite is not valid JSON text.", {"items": [str(exc)]}) from exc
    if len(canonical) > MAX_CANONICAL_BYTES:
        raise InvalidContent("The suite is too large.", {"items": [f"At most {MAX_CANONICAL_BYTES} bytes, canonical."]})
    return doc, canonical, content_hash(canonical)


def judges(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The judge bundles a suite pins, each once: [{"bundle", "content_hash"}]."""
    found = {
        (e["bundle"], e["content_hash"]) for item in doc["items"] for e in item["expect"] if e.get("type") == "judge"
    }
    return [{"bundle": b, "content_hash": h} for b, h in sorted(found)]


def scorers_hash(doc: dict[str, Any]) -> str:
    """The hash of every expectation of the suite, in item order: what the scores mean."""
    return content_hash(canonical_bytes([[item["id"], item["expect"]] for item in doc["items"]]))


def stored(canonical: bytes | memoryview) -> dict[str, Any]:
    """A published suite version's document, from its stored bytes (never canonicalised again)."""
    doc: dict[str, Any] = json.loads(bytes(canonical))
    return doc
