"""Langfuse prompts, from the objects its public API answers.

`GET /api/public/v2/prompts/{name}?version=N` answers one version: `{name, version, type
("text" | "chat"), prompt (text, or a list of messages), config, labels, tags, commitMessage}`
(and `createdBy` where the server sends it). An export is those objects in one JSON list (or
`{"data": [...]}`), any number of prompts and versions; docs/importing.md has the commands.

Mapping: a text prompt is the system prompt; a chat prompt's leading system messages are, and
its other messages are kept in `metadata.imported_from.messages`. `{{var}}` is declared as a
variable. `config.model` is the model's name, `config.tools` (OpenAI function tools) the tools,
`config.response_format` the output schema, the rest of `config` the model settings as they
are. Labels become registry labels, except `latest`: Langfuse moves it to every new version by
itself, so the registry's newest version already says what it says.
"""

from __future__ import annotations

from typing import Any

from promptreg.importers import (
    SourceError,
    SourcePrompt,
    SourceVersion,
    bundle_name,
    content,
    declared,
    function_tools,
    label_name,
    message,
    output_schema,
    split_messages,
)

IMPLICIT_LABELS = {"latest"}


def from_export(doc: Any, *, bundle: str | None = None) -> list[SourcePrompt]:
    """Each prompt in the export, its versions in version order."""
    items = doc.get("data") if isinstance(doc, dict) and "data" in doc else doc
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list) or not items:
        raise SourceError("the file must hold Langfuse prompt objects: a JSON list of them, or one")
    by_name: dict[str, list[tuple[int, SourceVersion]]] = {}
    for i, item in enumerate(items):
        name, number, version = _version(item, f"[{i}]")
        by_name.setdefault(name, []).append((number, version))
    if bundle is not None and len(by_name) > 1:
        raise SourceError(f"--bundle names one bundle, and the file holds {len(by_name)} prompts")
    prompts = []
    for name, versions in sorted(by_name.items()):
        numbers = [n for n, _ in versions]
        if len(set(numbers)) != len(numbers):
            raise SourceError(f"{name}: a version appears twice")
        prompts.append(
            SourcePrompt(
                source="langfuse",
                name=name,
                bundle=bundle or bundle_name(name),
                description=f"Imported from the Langfuse prompt {name}.",
                versions=[v for _, v in sorted(versions, key=lambda item: item[0])],
            )
        )
    return prompts


def _version(item: Any, where: str) -> tuple[str, int, SourceVersion]:
    if not isinstance(item, dict):
        raise SourceError(f"{where}: must be a prompt object")
    name, number = item.get("name"), item.get("version")
    if not isinstance(name, str) or not name:
        raise SourceError(f"{where}.name: must be the prompt's name")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise SourceError(f"{where}.version: must be the version number")
    where = f"{name} version {number}"
    origin: dict[str, Any] = {"system": "langfuse", "name": name, "version": number}
    system_prompt, texts, notes = _prompt(item, origin, where)
    config = item.get("config")
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise SourceError(f"{where}: config: must be an object")
    model = {k: v for k, v in config.items() if k not in ("model", "tools", "response_format")}
    if "model" in config:
        model["name"] = config["model"]
    tools, builtin = function_tools(config.get("tools"), f"{where}: config.tools")
    if builtin:
        origin["tools"] = builtin
        notes.append(f"{len(builtin)} non-function tool(s) kept in metadata.imported_from.tools")
    ref = f"langfuse {name} version {number}"
    version = SourceVersion(
        ref=ref,
        content=content(
            system_prompt=system_prompt,
            origin=origin,
            tools=tools,
            output_schema=output_schema(config.get("response_format"), f"{where}: config.response_format"),
            model=model,
            variables=declared(texts),
        ),
        message=message(text=item.get("commitMessage"), ref=ref, author=item.get("createdBy")),
        labels=_labels(item.get("labels"), where),
        notes=tuple(notes),
    )
    return name, number, version


def _prompt(item: dict[str, Any], origin: dict[str, Any], where: str) -> tuple[str, list[str], list[str]]:
    """(system prompt, every text that may hold variables, notes); a chat prompt's other
    messages go into `origin`."""
    kind = item.get("type", "text")
    if kind == "text":
        system_prompt = item.get("prompt")
        if not isinstance(system_prompt, str) or not system_prompt:
            raise SourceError(f"{where}: prompt: a text prompt's prompt must be text")
        return system_prompt, [system_prompt], []
    if kind != "chat":
        raise SourceError(f"{where}: type: must be text or chat, found {kind!r}")
    system_prompt, others, notes = split_messages(item.get("prompt"), f"{where}: prompt")
    if others:
        origin["messages"] = others
    return system_prompt, [system_prompt, *(m["content"] for m in others if isinstance(m.get("content"), str))], notes


def _labels(labels: Any, where: str) -> tuple[str, ...]:
    """The registry labels for a version's Langfuse labels (`latest` left out: see above)."""
    labels = labels or []
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise SourceError(f"{where}: labels: must be a list of label names")
    return tuple(sorted({label_name(label) for label in labels if label not in IMPLICIT_LABELS}))
