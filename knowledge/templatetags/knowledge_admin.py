"""`{% rendered_prefix version %}`: the version page's section showing the prompt prefix a
session would get for session variables typed into it (as JSON, in `?variables=`), with its
size in bytes and an estimate in tokens (core.tokens)."""

import json
from typing import Any

from django import template

from core.errors import InvalidContent
from core.tokens import estimate_tokens
from knowledge.render import version_prefix
from registry.parsed_content import content_document

register = template.Library()

_EXAMPLES = {"string": "", "integer": 0, "number": 0, "boolean": False}


def example_variables(declared: dict[str, Any]) -> dict[str, Any]:
    """Session variables to start from: each default, else an empty value of its type."""
    example = {}
    for name, decl in sorted(declared.items()):
        if decl.get("scope", "session") != "session":
            continue
        if "default" in decl:
            example[name] = decl["default"]
        else:
            example[name] = decl["values"][0] if decl.get("type") == "enum" else _EXAMPLES.get(decl.get("type"), "")
    return example


@register.inclusion_tag("knowledge/_prefix.html", takes_context=True)
def rendered_prefix(context: template.Context, version: Any) -> dict[str, Any]:
    request = context["request"]
    content = content_document(version_id=version.pk, content_hash=version.content_hash)
    declared = content.get("variables")
    raw = request.GET.get("variables")
    result: dict[str, Any] = {"declared": declared is not None, "error": None, "prefix": None}
    if raw is None:
        raw = json.dumps(example_variables(declared or {}), indent=2, ensure_ascii=False)
    result["raw"] = raw
    try:
        given = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        result["error"] = f"Not JSON: {exc}"
        return result
    try:
        prefix, values = version_prefix(
            version_id=version.pk, content_hash=version.content_hash, session_variables=given
        )
    except InvalidContent as exc:
        details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.details.items())
        result["error"] = f"{exc.message} {details}".strip()
        return result
    result.update(
        prefix=prefix,
        values=json.dumps(values, ensure_ascii=False, sort_keys=True),
        tools=json.dumps(prefix.tools, indent=2, ensure_ascii=False),
        size=len(prefix.body),
        tokens=estimate_tokens(prefix.body.decode()),
    )
    return result
