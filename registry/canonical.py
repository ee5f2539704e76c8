"""The bundle content document: validation, defaults and canonical bytes (see the REST contract).

A version stores the canonical bytes computed when it was published and serves those bytes
for ever; nothing re-canonicalises an old version, so changing this module later (a new
optional field, say) cannot change an old version's bytes or hash.
"""

import hashlib
import json
from collections.abc import Callable
from typing import Any

from core.errors import InvalidContent
from core.limits import CANONICAL_MAX_BYTES as MAX_CANONICAL_BYTES
from core.limits import PROMPT_MAX_CHARS as MAX_PROMPT_CHARS
from core.limits import TOOL_NAME_RE
from registry import includes, mcp_servers, variables
from registry.skills_content import content_errors as skills_content_errors

TOOL_KEYS = {"name", "description", "input_schema"}
# Kept only when given (an MCP server's outputSchema, registry.mcp_servers), so a tool without it
# keeps its bytes and hash.
OPTIONAL_TOOL_KEYS = {"output_schema"}

# Top-level fields with their defaults; system_prompt has none (required).
DEFAULTS: dict[str, Any] = {
    "tools": [],
    "guardrails": {},
    "output_schema": None,
    "model": {},
    "metadata": {},
}
# Optional fields kept only when given (no default is written), so a document without them keeps
# the bytes and hash it had before they existed. Their rules live in registry/skills_content.py.
OPTIONAL_FIELDS = {"skills", "compaction", mcp_servers.FIELD}
FIELDS = {"system_prompt", *DEFAULTS, *OPTIONAL_FIELDS}
# Every top-level field a content document may hold: what an editor must carry when it does not
# show a field (adminui.forms.VersionForm), so a field added later is never dropped.
CONTENT_FIELDS = frozenset(FIELDS | variables.FIELDS | includes.FIELDS)


def canonical_bytes(value: Any) -> bytes:
    """Keys sorted at every level, `,` and `:` separators, UTF-8 with non-ASCII unescaped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def content_hash(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def normalise_content(content: Any) -> dict[str, Any]:
    """Validate a content document and fill in defaults, or raise InvalidContent listing every problem."""
    if not isinstance(content, dict):
        raise InvalidContent("The content must be a JSON object.", {"content": ["Expected a JSON object."]})
    errors: dict[str, list[str]] = {}

    def err(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    known = CONTENT_FIELDS  # optional fields, in the document only when given
    for key in sorted(set(content) - known):
        err(f"content.{key}", f"Unknown field; allowed fields are {', '.join(sorted(known))}.")

    prompt = content.get("system_prompt")
    _check_prompt(prompt, err)

    doc = {"system_prompt": prompt}
    for key, default in DEFAULTS.items():
        doc[key] = content.get(key, default)

    for key in sorted(OPTIONAL_FIELDS & set(content)):
        doc[key] = content[key]
    for path, message in skills_content_errors(content):
        err(f"content.{path}", message)
    for path, message in mcp_servers.errors(content):
        err(f"content.{path}", message)

    _check_tools(doc["tools"], err)

    for key in ("guardrails", "model", "metadata"):
        if not isinstance(doc[key], dict):
            err(f"content.{key}", "Must be a JSON object.")
    if doc["output_schema"] is not None and not isinstance(doc["output_schema"], dict):
        err("content.output_schema", "Must be a JSON Schema object or null.")
    doc.update(variables.normalise(content, err))
    # The source and the snippets a resolved prompt came from (registry.includes), kept only when
    # the prompt had includes: registry.composition resolves them before this runs.
    doc.update(includes.normalise(content, err))

    if errors:
        raise InvalidContent("The bundle content is not valid; see details for each field.", errors)
    return doc


def _check_prompt(prompt: Any, err: Callable[[str, str], None]) -> None:
    if prompt is None:
        err("content.system_prompt", "This field is required.")
    elif not isinstance(prompt, str):
        err("content.system_prompt", "Must be a string.")
    elif not 1 <= len(prompt) <= MAX_PROMPT_CHARS:
        err("content.system_prompt", f"Must be 1 to {MAX_PROMPT_CHARS} characters long.")


def _check_tools(tools: Any, err: Callable[[str, str], None]) -> None:
    if not isinstance(tools, list):
        err("content.tools", "Must be a list of tools.")
        return
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        path = f"content.tools[{i}]"
        if not isinstance(tool, dict):
            err(path, "Each tool must be an object with name, description and input_schema.")
            continue
        for key in sorted(set(tool) - TOOL_KEYS - OPTIONAL_TOOL_KEYS):
            err(f"{path}.{key}", "Unknown field; a tool has name, description, input_schema and output_schema.")
        for key in sorted(TOOL_KEYS - set(tool)):
            err(f"{path}.{key}", "This field is required.")
        name = tool.get("name")
        if "name" in tool and (not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name)):
            err(f"{path}.name", "Must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$.")
        elif isinstance(name, str):
            if name in seen:
                err(f"{path}.name", f"Duplicate tool name {name!r}.")
            seen.add(name)
        if "description" in tool and not isinstance(tool["description"], str):
            err(f"{path}.description", "Must be a string.")
        if "input_schema" in tool and not isinstance(tool["input_schema"], dict):
            err(f"{path}.input_schema", "Must be a JSON Schema object.")
        if "output_schema" in tool and not isinstance(tool["output_schema"], dict):
            err(f"{path}.output_schema", "Must be a JSON Schema object.")


def canonicalise(content: Any) -> tuple[dict[str, Any], bytes, str]:
    """Return (normalised document, canonical bytes, content hash), validating it first."""
    doc = normalise_content(content)
    try:
        data = canonical_bytes(doc)
    except ValueError:  # NaN / Infinity cannot be represented in JSON
        raise InvalidContent("The content holds a number JSON cannot represent.", {"content": ["NaN or Infinity."]})
    except UnicodeEncodeError:  # a lone surrogate escape such as "\\ud800"
        raise InvalidContent("The content holds text that is not valid Unicode.", {"content": ["Lone surrogate."]})
    if len(data) > MAX_CANONICAL_BYTES:
        raise InvalidContent(
            "The canonical content is larger than 1 MiB.",
            {"content": [f"Canonical content is {len(data)} bytes; the limit is {MAX_CANONICAL_BYTES}."]},
        )
    return doc, data, content_hash(data)
