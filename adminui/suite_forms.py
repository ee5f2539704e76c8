"""The forms that write evaluation suites in the admin (docs/admin.md#evaluation-suites): cases as
rows (one user message, its variables and tags, and one scorer each; rows with the same case id
are one case with several scorers) and, beside them, the items as JSON (a list or one item per
line, as `promptreg eval import` reads), for what rows cannot say (several messages, a judge).
Both become one suite document, which goes to the services the API calls (evals.services: the
same validation); their problems come back beside the row or the box they are about."""

import json
import re
from typing import Any

from django import forms

from core.errors import InvalidContent
from evals.models import SUITE_NAME_MAX
from evals.scorers import KINDS

CODE = {"class": "adminui-code", "spellcheck": "false", "autocomplete": "off"}
MAX_ROWS = 50
MAX_JSON = 1 << 20  # characters of the items box
ROW_FIELDS = ("case", "message", "variables", "tags", "scorer", "value", "options")
# What a row's "value" box is, per scorer (the rest of a scorer's fields go in "options", JSON).
VALUE_FIELD = {"contains": "value", "equals": "value", "regex": "pattern", "tool_call": "name"}
NUMBER_FIELD = {"max_tokens": int, "max_cost": float}


class SuiteForm(forms.Form):
    name = forms.CharField(max_length=SUITE_NAME_MAX, help_text="Lower case: letters, digits, . _ -")
    description = forms.CharField(required=False, max_length=2_000, widget=forms.Textarea(attrs={"rows": 2}))


class SuiteVersionForm(forms.Form):
    message = forms.CharField(max_length=10_000, help_text="What this version of the suite changes, and why.")
    items_json = forms.CharField(
        required=False,
        label="Items as JSON",
        max_length=MAX_JSON,
        widget=forms.Textarea(attrs={"rows": 8, **CODE}),
        help_text="A JSON list of items, or one item per line: {id, input: {messages, variables, turn_variables}, "
        "expect: [...], tags}. Kept before the rows' cases.",
    )


def _row_value(request_data: Any, index: int, field: str) -> str:
    return str(request_data.get(f"row-{index}-{field}", "")).strip()


def rows_from(data: Any, count: int) -> list[dict[str, str]]:
    """The rows as typed (every field kept, to show them again)."""
    return [{f: _row_value(data, i, f) for f in ROW_FIELDS} for i in range(min(count, MAX_ROWS))]


def _json_object(text: str, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what}: not JSON ({exc}).") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}: a JSON object.")
    return value


def scorer_of(row: dict[str, str]) -> dict[str, Any]:
    """A row's scorer: its type, its value in the field the type names, its options (JSON)."""
    kind = row["scorer"]
    if kind not in KINDS:
        raise ValueError(f"scorer: one of {', '.join(KINDS)}.")
    scorer: dict[str, Any] = {"type": kind, **_json_object(row["options"], "options")}
    if kind in VALUE_FIELD and row["value"]:
        scorer[VALUE_FIELD[kind]] = row["value"]
    elif kind in NUMBER_FIELD and row["value"]:
        try:
            scorer["value"] = NUMBER_FIELD[kind](row["value"])
        except ValueError:
            raise ValueError(f"value: a number for {kind}.") from None
    return scorer


def _case(row: dict[str, str]) -> dict[str, Any]:
    given: dict[str, Any] = {"messages": [{"role": "user", "content": row["message"]}]}
    variables = _json_object(row["variables"], "variables")
    if variables:
        given["variables"] = variables
    tags = [t.strip() for t in re.split(r"[,\s]+", row["tags"]) if t.strip()]
    return {"id": row["case"], "input": given, "expect": [], "tags": tags}


def items_from_rows(rows: list[dict[str, str]]) -> tuple[list[dict[str, Any]], dict[int, str], list[list[int]]]:
    """The rows' cases as suite items: (items, row problems by row index, the rows of each item).
    An empty row is skipped; a row with only a scorer adds it to the case above it."""
    items: list[dict[str, Any]] = []
    problems: dict[int, str] = {}
    rows_of: list[list[int]] = []
    by_id: dict[str, int] = {}
    for index, row in enumerate(rows):
        if not any(row.values()):
            continue
        try:
            case_id = row["case"] or (items[-1]["id"] if items and not row["message"] else "")
            if not case_id:
                raise ValueError("case: give the case an id.")
            if case_id not in by_id:
                if not row["message"]:
                    raise ValueError("message: the user message of this case.")
                by_id[case_id] = len(items)
                items.append(_case({**row, "case": case_id}))
                rows_of.append([])
            position = by_id[case_id]
            items[position]["expect"].append(scorer_of(row))
            rows_of[position].append(index)
        except ValueError as exc:
            problems[index] = str(exc)
    return items, problems, rows_of


def items_from_json(text: str) -> list[dict[str, Any]]:
    """The items box: a JSON list, or one JSON item per line; ValueError naming the line."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"Not JSON: {exc}.") from None
        if not isinstance(value, list):
            raise ValueError("A JSON list of items.")
        return value
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"line {number}: not JSON ({exc}).") from None
    return items


def place_problems(
    exc: InvalidContent, *, from_json: int, rows_of: list[list[int]]
) -> tuple[list[str], dict[int, list[str]]]:
    """The service's problems (`items[3].expect[0]: ...`) put where they were typed: those of the
    JSON box's items as its messages, those of the rows' cases beside each row of that case."""
    box: list[str] = []
    rows: dict[int, list[str]] = {}
    for path, messages in (exc.details or {}).items():
        found = re.match(r"^items\[(\d+)\](?:\.expect\[(\d+)\])?", path)
        said = [str(m) for m in (messages if isinstance(messages, list) else [messages])]
        if found is None or int(found.group(1)) < from_json:
            box += [f"{path}: {m}" for m in said]
            continue
        case_rows = rows_of[int(found.group(1)) - from_json]
        scorer = int(found.group(2)) if found.group(2) is not None else 0
        row = case_rows[min(scorer, len(case_rows) - 1)]
        rows.setdefault(row, []).extend(f"{path.split('.', 1)[1] if '.' in path else path}: {m}" for m in said)
    return box or ([exc.message] if not rows else []), rows
