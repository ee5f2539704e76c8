"""`promptreg import`: bring prompts kept elsewhere into the registry as bundles.

Each source module turns what it reads into `SourcePrompt`s with pure functions (no network in
the mapping, so a file shaped like the documented export is enough to test it):

    openai.py     the JSON copy of a prompt object's versions (OpenAI has no export API)
    langfuse.py   Langfuse's public API objects (GET /api/public/v2/prompts/{name}?version=N)
    mlflow.py     a running MLflow tracking server's prompt registry, over its REST API

`plan` asks the registry what importing a prompt would do, with this key, refusals included,
and `apply` does it, all or nothing (one request each; the registry runs the same steps for
both): one publish per source version, so importing again publishes nothing (identical content
returns the existing version) and moves no label that is already in place. The layout and each
mapping are described in docs/importing.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from promptreg.errors import RegistryError
from promptreg.sync import Registry

# The registry's names (core/limits.py): bundles and labels are lowercase slugs.
_BUNDLE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_LABEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")
# `{{name}}` as the registry templates it (registry/variables.py REFERENCE_RE).
_REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_MESSAGE_MAX = 10_000  # a version message's limit (core/limits.py TEXT_MAX_CHARS)


class SourceError(Exception):
    """The source is not what the importer reads: names the place and what is wrong."""


@dataclass(frozen=True)
class SourceVersion:
    """One version of the source prompt, mapped: `content` is a complete content document."""

    ref: str  # how the source names it, for people: "pmpt_abc version 3"
    content: dict[str, Any]
    message: str
    labels: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the mapping kept elsewhere or left out


@dataclass(frozen=True)
class SourcePrompt:
    """A prompt with its versions oldest first; it becomes the bundle `bundle`."""

    source: str  # "openai", "langfuse", "mlflow"
    name: str  # the source's name of the prompt
    bundle: str
    description: str
    versions: list[SourceVersion] = field(default_factory=list)


def bundle_name(name: str) -> str:
    """The registry's name for a source prompt name: lowercase, other characters as '-'."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")[:100]
    if not _BUNDLE_NAME.fullmatch(slug):
        raise SourceError(f"{name!r} gives no bundle name; pass --bundle")
    return slug


def label_name(name: str) -> str:
    """The registry's label for a source label or alias ("Prod.EU" -> "prod-eu")."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:50]
    if not _LABEL_NAME.fullmatch(slug):
        raise SourceError(f"the label {name!r} gives no registry label name")
    return slug


def declared(texts: list[str], names: list[str] | None = None) -> dict[str, Any]:
    """Declarations for the variables a prompt uses: the `names` the source lists and every
    `{{name}}` in `texts`. Optional strings, session-scoped: the sources have no types, and a
    variable a session does not give renders as empty text, as it does at OpenAI and Langfuse."""
    found = list(names or [])
    for text in texts:
        found.extend(m.group(1) for m in _REFERENCE.finditer(text))
    result: dict[str, Any] = {}
    for name in found:
        if not _VARIABLE_NAME.fullmatch(name):
            raise SourceError(f"the variable name {name!r} is not one the registry accepts ([A-Za-z_][A-Za-z0-9_]*)")
        result.setdefault(name, {"type": "string"})
    return dict(sorted(result.items()))


def content(
    *,
    system_prompt: str,
    origin: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
    output_schema: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete content document (every default written out, so it equals what the registry
    stores and a dry run can compare). `origin` goes into `metadata.imported_from`: it names
    the source version, so each source version is one registry version even when two of them
    hold the same text, and importing the same version again finds it."""
    doc: dict[str, Any] = {
        "system_prompt": system_prompt,
        "tools": tools or [],
        "guardrails": {},
        "output_schema": output_schema,
        "model": model or {},
        "metadata": {"imported_from": origin},
    }
    if variables:
        doc["variables"] = variables
    return doc


def message(*, text: str | None, ref: str, author: str | None) -> str:
    """The version message: the source's own message, then where it came from and who wrote it
    (the registry records the importing key as the author; the source's author is kept here)."""
    by = f", by {author}" if author else ""
    note = f"imported from {ref}{by}"
    text = (text or "").strip()
    if not text:
        return note
    return f"{text[: _MESSAGE_MAX - len(note) - 2]}\n\n{note}"


def split_messages(messages: Any, where: str) -> tuple[str, list[Any], list[str]]:
    """(system prompt, the other messages, notes) of a chat prompt. The registry's prompt is a
    system prompt: the system (or developer) messages, joined by a blank line, make it; the
    other messages are kept in order for the version's metadata (the agent sends them as its
    first turns). With no system message, the first message's text is the prompt."""
    if not isinstance(messages, list) or not messages:
        raise SourceError(f"{where}: a chat prompt must be a non-empty list of messages")
    system: list[str] = []
    rest: list[Any] = []
    for i, item in enumerate(messages):
        if not isinstance(item, dict):
            raise SourceError(f"{where}[{i}]: must be an object with role and content")
        # Only the leading ones: a system message between turns stays where it is.
        if item.get("role") in ("system", "developer") and not rest:
            if not isinstance(item.get("content"), str):
                raise SourceError(f"{where}[{i}].content: must be text")
            system.append(item["content"])
        else:
            rest.append(item)
    notes = []
    if not system:
        first = rest[0]
        if not isinstance(first.get("content"), str):
            raise SourceError(f"{where}[0].content: must be text (it becomes the system prompt)")
        system, rest = [first["content"]], rest[1:]
        notes.append(f"no system message: the first ({first.get('role', '?')}) message is the system prompt")
    if rest:
        notes.append(f"{len(rest)} other message(s) kept in metadata.imported_from.messages")
    return "\n\n".join(system), rest, notes


def function_tools(tools: Any, where: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """(registry tools, the rest): OpenAI function tools, in the Responses shape
    `{"type": "function", "name", "description", "parameters"}` or the Chat Completions shape
    `{"type": "function", "function": {...}}`, become `{"name", "description", "input_schema"}`;
    a built-in tool (web_search, file_search, an MCP server...) has no registry equivalent and
    is returned in the rest, for the caller to keep in the version's metadata."""
    if tools is None:
        return [], []
    if not isinstance(tools, list):
        raise SourceError(f"{where}: must be a list of tools")
    mapped: list[dict[str, Any]] = []
    others: list[Any] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise SourceError(f"{where}[{i}]: must be an object")
        if tool.get("type") != "function":
            others.append(tool)
            continue
        spec = tool.get("function", tool)
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not name:
            raise SourceError(f"{where}[{i}]: a function tool needs a name")
        schema = spec.get("parameters") or {"type": "object", "properties": {}}
        mapped.append({"name": name, "description": spec.get("description") or "", "input_schema": schema})
    return mapped, others


def output_schema(response_format: Any, where: str) -> dict[str, Any] | None:
    """The output schema from an OpenAI text format (Responses `text.format`, or Chat
    Completions `response_format`, whose schema sits one level down in `json_schema`)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise SourceError(f"{where}: must be an object")
    kind = response_format.get("type")
    if kind == "json_schema":
        inner = response_format.get("json_schema", response_format)
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise SourceError(f"{where}: a json_schema format needs a schema object")
        return schema
    if kind == "json_object":
        return {"type": "object"}
    return None


# --- the plan and its application ------------------------------------------------------------
# Both are one request, POST /bundles/{name}/import-versions/ (registry/imports.py): the server
# runs every step (create the bundle, publish each version, move each label) through the rules
# of the bundle, version and label endpoints, with this key, in one transaction. A dry run is the
# same run rolled back, so it checks what the real run will (permissions, protected labels,
# compatibility, required checks and approvals); a real run refused anywhere writes nothing.


class ImportRefused(Exception):
    """The registry refused a step of the import; nothing was written. `doc` is the plan, with
    each refused step in `doc["refused"]`."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(f"{doc['bundle']}: the import was refused")
        self.doc = doc


def _label_targets(prompt: SourcePrompt) -> dict[str, int]:
    """{label: index of the source version} from the source versions' labels (a label on two
    source versions, which no source allows, would end on the later one)."""
    wanted: dict[str, int] = {}
    for index, version in enumerate(prompt.versions):
        for label in version.labels:
            wanted[label] = index
    return wanted


def _run(registry: Registry, prompt: SourcePrompt, *, allow_breaking: bool, dry_run: bool) -> dict[str, Any]:
    body = {
        "source": f"{prompt.source} {prompt.name}",
        "description": prompt.description,
        "versions": [{"content": v.content, "message": v.message} for v in prompt.versions],
        "labels": _label_targets(prompt),
        "allow_breaking": allow_breaking,
        "dry_run": dry_run,
    }
    try:
        answer = registry.json("POST", f"/api/v1/bundles/{prompt.bundle}/import-versions/", json=body)
        refused = False
    except RegistryError as exc:
        if not isinstance(exc.details.get("refused"), list):
            raise
        # Refused, nothing written: the same run as a dry run says what each step would have done.
        answer = registry.json(
            "POST", f"/api/v1/bundles/{prompt.bundle}/import-versions/", json={**body, "dry_run": True}
        )
        refused = True
    doc = {
        "source": prompt.source,
        "name": prompt.name,
        "bundle": prompt.bundle,
        "bundle_exists": answer["bundle_exists"],
        "versions": [
            {
                "ref": version.ref,
                "version": step["version"],
                "exists": step["exists"],
                "refused": step["refused"],
                "notes": list(version.notes),
            }
            for version, step in zip(prompt.versions, answer["versions"], strict=True)
        ],
        "labels": answer["labels"],
        "refused": answer["refused"],
    }
    if refused or (doc["refused"] and not dry_run):
        raise ImportRefused(doc)
    return doc


def plan(registry: Registry, prompt: SourcePrompt, *, allow_breaking: bool = False) -> dict[str, Any]:
    """What importing `prompt` would do, without writing: each source version with the registry
    version it is (`exists`) or would become, each label with its current and new target, and
    in `refused` every step the registry would refuse with this key."""
    return _run(registry, prompt, allow_breaking=allow_breaking, dry_run=True)


def apply(registry: Registry, prompt: SourcePrompt, *, allow_breaking: bool = False) -> dict[str, Any]:
    """Import `prompt`: create the bundle if needed, publish each version oldest first (a
    version already there is returned as it is), then point each label at its version; all or
    nothing. Raises ImportRefused (nothing written) when any step is refused."""
    return _run(registry, prompt, allow_breaking=allow_breaking, dry_run=False)


def refusal_lines(doc: dict[str, Any]) -> list[str]:
    """Each refused step, for people: which step, and the registry's answer."""
    lines = []
    for refusal in doc["refused"]:
        step = refusal["step"]
        match = re.fullmatch(r"versions\[(\d+)\]", step)
        if match:
            where = doc["versions"][int(match.group(1))]["ref"]
        elif step.startswith("labels."):
            where = f"label {step.removeprefix('labels.')}"
        else:
            where = step
        lines.append(f"  refused: {where}: {refusal['message']} [{refusal['status']} {refusal['code']}]")
    return lines


def _version_lines(step: dict[str, Any], dry_run: bool) -> list[str]:
    if step.get("refused"):
        head = f"  {step['ref']} -> refused"
    else:
        state = "already there" if step["exists"] else "would publish" if dry_run else "published"
        head = f"  {step['ref']} -> version {step['version']} ({state})"
    return [head, *(f"      note: {note}" for note in step["notes"])]


def _label_line(move: dict[str, Any], dry_run: bool) -> str:
    if move["to"] is None:
        return f"  label {move['label']}: not moved (its version is refused)"
    if not move["moved"]:
        return f"  label {move['label']}: already at version {move['to']}"
    source = "(new)" if move["from"] is None else f"version {move['from']}"
    return f"  label {move['label']}: {source} -> version {move['to']}{' (would move)' if dry_run else ''}"


def describe(doc: dict[str, Any], *, dry_run: bool) -> list[str]:
    """The plan (or what was done) as lines for people."""
    head = f"{doc['source']} {doc['name']} -> bundle {doc['bundle']}"
    lines = [head if doc["bundle_exists"] else f"{head} ({'would create' if dry_run else 'created'})"]
    for step in doc["versions"]:
        lines += _version_lines(step, dry_run)
    lines += [_label_line(move, dry_run) for move in doc["labels"]]
    added = sum(not s["exists"] for s in doc["versions"])
    moved = sum(m["moved"] for m in doc["labels"])
    if not added and not moved and doc["bundle_exists"] and not doc.get("refused"):
        lines.append("  nothing to import: every version and label is already there")
    return lines + refusal_lines(doc) if doc.get("refused") else lines
