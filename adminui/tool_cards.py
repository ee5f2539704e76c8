"""A version's tools as a person reads them: per tool its name, description and a table of its
top-level parameters (name, type, required, description), in the author's order; the JSON stays
one click away on the page. Pure functions of the content document."""

from dataclasses import dataclass, field
from typing import Any

# Human headings of the content fields on the version page (a field added later shows its key).
HEADINGS = {
    "tools": "Tools",
    "guardrails": "Guardrails",
    "output_schema": "Output schema",
    "model": "Model",
    "metadata": "Metadata",
    "variables": "Variables",
    "knowledge": "Knowledge packs",
    "skills": "Skills (JSON)",
    "compaction": "Compaction policy",
    "mcp_servers": "MCP servers",
}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    required: bool
    description: str


@dataclass(frozen=True)
class ToolCard:
    name: str
    description: str
    parameters: list[Parameter] = field(default_factory=list)
    more: bool = False  # the schema says more than the table shows (nesting, $ref, constraints)


def _type(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if isinstance(kind, list):
        text = " or ".join(str(k) for k in kind)
    elif isinstance(kind, str):
        text = kind
    elif "$ref" in schema:
        text = str(schema["$ref"]).rsplit("/", 1)[-1]
    else:
        text = "any"
    if kind == "array" and isinstance(schema.get("items"), dict):
        text = f"array of {_type(schema['items'])}"
    if isinstance(schema.get("enum"), list):
        text += ": " + ", ".join(str(v) for v in schema["enum"][:10])
    return text


_TABLE_KEYS = {"type", "description", "enum", "items", "title"}


def tool_cards(tools: Any) -> list[ToolCard]:
    cards: list[ToolCard] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        raw = tool.get("input_schema")
        schema: dict[str, Any] = raw if isinstance(raw, dict) else {}
        props = schema.get("properties")
        properties: dict[str, Any] = props if isinstance(props, dict) else {}
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        parameters = [
            Parameter(
                name=str(name),
                type=_type(sub),
                required=name in required,
                description=str(sub.get("description", "")) if isinstance(sub, dict) else "",
            )
            for name, sub in properties.items()
        ]
        more = set(schema) - {"type", "properties", "required"} != set() or any(
            isinstance(sub, dict) and set(sub) - _TABLE_KEYS for sub in properties.values()
        )
        cards.append(
            ToolCard(
                name=str(tool.get("name", "")),
                description=str(tool.get("description", "")),
                parameters=parameters,
                more=more,
            )
        )
    return cards
