"""Scorers: what a suite item expects of a reply, and the verdict on one reply.

A reply is the neutral shape the eval runner reports for each item and run:

    {"text": str, "tool_calls": [{"name": str, "arguments": {...}}],
     "usage": {"input_tokens": int, "output_tokens": int}, "cost_usd": float | None,
     "error": str | None, "judges": {"<expectation index>": {"score": float, "reason": str}}}

Every scorer is a pure function of the expectation, the reply and the version's output schema,
so the registry scores the stored replies itself; only a judge's score comes from the runner,
which called the judge bundle pinned by hash. A reply with an `error` fails every expectation
(an error is never a pass)."""

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from core import patterns

KINDS = ("contains", "regex", "equals", "json_schema", "tool_call", "judge", "max_tokens", "max_cost")
MAX_TEXT = 10_000  # characters of an expected value
MAX_REPLY_TEXT = 1 << 20  # characters of a reply a regex or a schema looks at
# A scorer's pattern is a publisher's, run on every reply of a run: grep's bounds (core.patterns).
PATTERN = patterns.GREP
_KEYS: dict[str, set[str]] = {
    "contains": {"value", "case_sensitive"},
    "regex": {"pattern"},
    "equals": {"value"},
    "json_schema": {"schema"},
    "tool_call": {"name", "arguments"},
    "judge": {"bundle", "content_hash", "min_score"},
    "max_tokens": {"value"},
    "max_cost": {"value"},
}


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value and abs(value) < 1e12


def _text_problem(e: dict[str, Any]) -> str | None:
    value = e.get("value")
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        return f"value: text of 1 to {MAX_TEXT} characters."
    if not isinstance(e.get("case_sensitive", False), bool):
        return "case_sensitive: true or false."
    return None


def _regex_problem(e: dict[str, Any]) -> str | None:
    try:
        patterns.compile_bounded(e.get("pattern"), PATTERN)
    except patterns.PatternRefused as exc:
        return f"pattern: {exc}"
    return None


def _schema_problem(e: dict[str, Any]) -> str | None:
    schema = e.get("schema")
    if schema is None:
        return None
    if not isinstance(schema, dict):
        return "schema: a JSON Schema object (or leave it out for the version's output schema)."
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"schema: not a valid JSON Schema ({exc.message[:200]})."
    return None


def _tool_call_problem(e: dict[str, Any]) -> str | None:
    name = e.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 128:
        return "name: the tool's name."
    if not isinstance(e.get("arguments", {}), dict):
        return "arguments: an object the call's arguments must contain."
    return None


def _judge_problem(e: dict[str, Any]) -> str | None:
    if not isinstance(e.get("bundle"), str) or not e["bundle"]:
        return "bundle: the judge bundle's name."
    digest = e.get("content_hash")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return "content_hash: the judge version's content hash (64 hex digits): a judge is pinned by hash."
    minimum = e.get("min_score", 0.5)
    if not is_number(minimum) or not 0 <= minimum <= 1:
        return "min_score: a number from 0 to 1."
    return None


def _max_tokens_problem(e: dict[str, Any]) -> str | None:
    value = e.get("value")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "value: a positive integer (output tokens)."
    return None


def _max_cost_problem(e: dict[str, Any]) -> str | None:
    if not is_number(e.get("value")) or e["value"] < 0:
        return "value: a non-negative number (USD per reply)."
    return None


_PROBLEMS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "contains": _text_problem,
    "equals": _text_problem,
    "regex": _regex_problem,
    "json_schema": _schema_problem,
    "tool_call": _tool_call_problem,
    "judge": _judge_problem,
    "max_tokens": _max_tokens_problem,
    "max_cost": _max_cost_problem,
}


def problem(expectation: Any) -> str | None:
    """Why `expectation` is not a valid scorer, or None."""
    if not isinstance(expectation, dict) or expectation.get("type") not in KINDS:
        return f"An object whose type is one of {', '.join(KINDS)}."
    kind = expectation["type"]
    extra = set(expectation) - _KEYS[kind] - {"type"}
    if extra:
        return f"Unknown field {sorted(extra)[0]!r} for {kind}; it takes {', '.join(sorted(_KEYS[kind]))}."
    return _PROBLEMS[kind](expectation)


def _contains(text: str, part: str, case_sensitive: bool) -> bool:
    return part in text if case_sensitive else part.casefold() in text.casefold()


def _partial(actual: Any, expected: Any) -> bool:
    """`expected` is contained in `actual`: every key of an object, every value equal otherwise."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _partial(actual[k], v) for k, v in expected.items())
    return bool(actual == expected)


def _parsed(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _json_schema(e: dict[str, Any], reply: dict[str, Any], output_schema: Any) -> tuple[bool, str]:
    schema = e.get("schema") if e.get("schema") is not None else output_schema
    if not isinstance(schema, dict):
        return False, "the version has no output schema and the expectation gives none"
    ok, value = _parsed(reply["text"][:MAX_REPLY_TEXT])
    if not ok:
        return False, "the reply is not JSON"
    error = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    return (
        error is None,
        "valid" if error is None else f"invalid at {list(error.absolute_path)}: {error.message[:200]}",
    )


def _tool_call(e: dict[str, Any], reply: dict[str, Any]) -> tuple[bool, str]:
    calls = [c for c in reply["tool_calls"] if c.get("name") == e["name"]]
    if not calls:
        return False, f"no call of {e['name']}"
    if any(_partial(c.get("arguments"), e.get("arguments", {})) for c in calls):
        return True, f"called {e['name']}"
    return False, f"{e['name']} called with other arguments"


def _judge(e: dict[str, Any], reply: dict[str, Any], index: int) -> tuple[bool, str, float | None]:
    verdict = (reply.get("judges") or {}).get(str(index))
    if not isinstance(verdict, dict) or not is_number(verdict.get("score")):
        return False, "no judge score reported", None
    score = float(verdict["score"])
    reason = str(verdict.get("reason", ""))[:500]
    return score >= e.get("min_score", 0.5), reason, score


def _cost(e: dict[str, Any], reply: dict[str, Any]) -> tuple[bool, str]:
    cost = reply.get("cost_usd")
    if not is_number(cost):
        return False, "cost unknown (the model has no price)"
    return cost <= e["value"], f"{cost:.6f} USD"


_SIMPLE: dict[str, Callable[[dict[str, Any], dict[str, Any]], tuple[bool, str]]] = {
    "contains": lambda e, r: (_contains(r["text"], e["value"], e.get("case_sensitive", False)), "found"),
    "equals": lambda e, r: (r["text"].strip() == e["value"].strip(), "equal"),
    "regex": lambda e, r: (
        patterns.compile_bounded(e["pattern"], PATTERN).search(r["text"][:MAX_REPLY_TEXT]) is not None,
        "matched",
    ),
    "tool_call": _tool_call,
    "max_tokens": lambda e, r: (
        (r.get("usage") or {}).get("output_tokens", 1 << 62) <= e["value"],
        f"{(r.get('usage') or {}).get('output_tokens')} output tokens",
    ),
    "max_cost": _cost,
}


def score(expectation: dict[str, Any], reply: dict[str, Any], *, index: int, output_schema: Any) -> dict[str, Any]:
    """The verdict of one expectation on one reply: {"type", "passed", "detail", "score"?}."""
    kind = expectation["type"]
    if reply.get("error"):
        return {"type": kind, "passed": False, "detail": "error: " + str(reply["error"])[:300]}
    if kind == "judge":
        passed, detail, value = _judge(expectation, reply, index)
        return {"type": kind, "passed": passed, "detail": detail, "score": value}
    if kind == "json_schema":
        passed, detail = _json_schema(expectation, reply, output_schema)
    else:
        passed, detail = _SIMPLE[kind](expectation, reply)
        if not passed and kind in ("contains", "equals", "regex"):
            detail = "not " + detail
    return {"type": kind, "passed": bool(passed), "detail": detail}
