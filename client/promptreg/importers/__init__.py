"""`promptreg import`: bring prompts kept elsewhere into the registry as bundles.

Each source module turns what it reads into `SourcePrompt`s with pure functions (no network in
the mapping, so a file shaped like the documented export is enough to test it):

    openai.py     the JSON copy of a prompt object's versions (OpenAI has no export API)
    langfuse.py   Langfuse's public API objects (GET /api/public/v2/prompts/{name}?version=N)
    mlflow.py     a running MLflow tracking server's prompt registry, over its REST API

`plan` then compares a prompt with what the registry holds and `apply` publishes the versions
it lacks, oldest first, and points the labels: one publish per source version, so importing
again publishes nothing (identical content returns the existing version) and moves no label
that is already in place. The layout and each mapping are described in docs/importing.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from promptreg.errors import InvalidRequest, NotFound
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


def _existing(registry: Registry, bundle: str) -> tuple[bool, list[dict[str, Any]], dict[str, int]]:
    """(bundle exists, its versions, its single-target labels as {name: version})."""
    try:
        registry.bundle_info(bundle)
    except NotFound:
        return False, [], {}
    versions = registry.versions(bundle)
    # A label split between versions counts as pointing at none: the import points it at one.
    labels = {
        label["name"]: label["targets"][0]["number"]
        for label in registry.export_document(bundle)["labels"]
        if len(label["targets"]) == 1
    }
    return True, versions, labels


def _label_targets(prompt: SourcePrompt, steps: list[dict[str, Any]]) -> dict[str, int]:
    """{label: registry version} from the source versions' labels (a label on two source
    versions, which no source allows, would end on the later one)."""
    wanted: dict[str, int] = {}
    for version, step in zip(prompt.versions, steps, strict=True):
        for label in version.labels:
            wanted[label] = step["version"]
    return wanted


def plan(registry: Registry, prompt: SourcePrompt) -> dict[str, Any]:
    """What importing `prompt` would do, without writing: each source version with the registry
    version it is (`exists`) or would become, and each label with its current and new target."""
    exists, versions, labels = _existing(registry, prompt.bundle)
    numbers: list[tuple[dict[str, Any], int]] = [(v["content"], v["number"]) for v in versions]
    following = max((n for _, n in numbers), default=0) + 1
    steps = []
    for version in prompt.versions:
        number = next((n for c, n in numbers if c == version.content), None)
        if number is None:
            number, following = following, following + 1
            numbers.append((version.content, number))
            steps.append({"ref": version.ref, "version": number, "exists": False, "notes": list(version.notes)})
        else:
            steps.append({"ref": version.ref, "version": number, "exists": True, "notes": list(version.notes)})
    wanted = _label_targets(prompt, steps)
    moves = [
        {"label": name, "from": labels.get(name), "to": number, "moved": labels.get(name) != number}
        for name, number in sorted(wanted.items())
    ]
    return {
        "source": prompt.source,
        "name": prompt.name,
        "bundle": prompt.bundle,
        "bundle_exists": exists,
        "versions": steps,
        "labels": moves,
    }


def apply(registry: Registry, prompt: SourcePrompt, *, allow_breaking: bool = False) -> dict[str, Any]:
    """Import `prompt`: create the bundle if needed, publish each version oldest first (a
    version already there is returned as it is), then point each label at its version."""
    doc = plan(registry, prompt)
    if not doc["bundle_exists"]:
        registry.create_bundle(prompt.bundle, description=prompt.description)
    for version, step in zip(prompt.versions, doc["versions"], strict=True):
        try:
            published, created = registry.publish(prompt.bundle, version.content, message=version.message)
        except InvalidRequest as exc:
            problems = "; ".join(f"{path}: {' '.join(map(str, m))}" for path, m in exc.details.items())
            raise SourceError(f"{version.ref}: the registry refused it: {exc.message} {problems}".strip()) from None
        step.update(version=published["number"], exists=not created)
    wanted = _label_targets(prompt, doc["versions"])
    for move in doc["labels"]:
        move["to"] = wanted[move["label"]]
        move["moved"] = move["from"] != move["to"]
        if move["moved"]:
            registry.move_label(
                prompt.bundle,
                move["label"],
                version=move["to"],
                reason=f"imported from {prompt.source} {prompt.name}: {move['label']}",
                allow_breaking=allow_breaking,
            )
    return doc


def describe(doc: dict[str, Any], *, dry_run: bool) -> list[str]:
    """The plan (or what was done) as lines for people."""
    would = "would " if dry_run else ""
    head = f"{doc['source']} {doc['name']} -> bundle {doc['bundle']}"
    lines = [head if doc["bundle_exists"] else f"{head} ({'would create' if dry_run else 'created'})"]
    for step in doc["versions"]:
        state = "already there" if step["exists"] else f"{would}publish" if dry_run else "published"
        lines.append(f"  {step['ref']} -> version {step['version']} ({state})")
        lines.extend(f"      note: {note}" for note in step["notes"])
    for move in doc["labels"]:
        if move["moved"]:
            source = "(new)" if move["from"] is None else f"version {move['from']}"
            tail = " (would move)" if dry_run else ""
            lines.append(f"  label {move['label']}: {source} -> version {move['to']}{tail}")
        else:
            lines.append(f"  label {move['label']}: already at version {move['to']}")
    added = sum(not s["exists"] for s in doc["versions"])
    moved = sum(m["moved"] for m in doc["labels"])
    if not added and not moved and doc["bundle_exists"]:
        lines.append("  nothing to import: every version and label is already there")
    return lines
