"""OpenAI prompt objects (`pmpt_...`), from the JSON copy a team makes of each version.

OpenAI has no API that lists a prompt's versions or returns their text, so the copy is made by
hand from the dashboard, in the shape docs/importing.md describes ("promptreg.openai-prompt/1";
docs/examples/openai-prompt.json is one). A version's fields are those of a Responses API
request: `instructions` is the system prompt, `model` and the sampling settings the model
settings, `tools` the tools, `text.format` the output schema; `variables` lists the names.
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
)

FORMAT = "promptreg.openai-prompt/1"
# What a version entry holds besides model settings; every other key is a model setting.
_VERSION_KEYS = {"version", "message", "author", "instructions", "messages", "variables", "tools", "text"}
# Responses API names to the registry's (docs/rendering.md: model.name, max_tokens, ...).
_RENAMED = {"model": "name", "max_output_tokens": "max_tokens"}


def from_copy(doc: Any, *, bundle: str | None = None) -> SourcePrompt:
    """The prompt a copy describes, its versions in version order."""
    if not isinstance(doc, dict):
        raise SourceError("the file must hold one JSON object (a prompt with its versions)")
    if doc.get("format", FORMAT) != FORMAT:
        raise SourceError(f"format: expected {FORMAT!r}, found {doc.get('format')!r}")
    prompt_id = doc.get("id")
    if not isinstance(prompt_id, str) or not prompt_id.startswith("pmpt_"):
        raise SourceError("id: must be the prompt's id, pmpt_...")
    versions = doc.get("versions")
    if not isinstance(versions, list) or not versions:
        raise SourceError("versions: must be a non-empty list")
    by_version = _labels(doc.get("labels") or {})
    mapped = [_version(prompt_id, entry, f"versions[{i}]") for i, entry in enumerate(versions)]
    numbers = [number for number, _ in mapped]
    if len(set(numbers)) != len(numbers):
        raise SourceError("versions: a version number appears twice")
    unknown = sorted(set(by_version) - set(numbers))
    if unknown:
        raise SourceError(f"labels: version {unknown[0]} is not in versions")
    mapped.sort(key=lambda item: _order(item[0]))
    name = doc.get("name") or prompt_id
    return SourcePrompt(
        source="openai",
        name=prompt_id,
        bundle=bundle or bundle_name(name),
        description=str(doc.get("description") or f"Imported from the OpenAI prompt {prompt_id}."),
        versions=[
            SourceVersion(
                ref=v.ref,
                content=v.content,
                message=v.message,
                labels=tuple(sorted(by_version.get(number, []))),
                notes=v.notes,
            )
            for number, v in mapped
        ],
    )


def _labels(labels: Any) -> dict[str, list[str]]:
    """{version: [registry labels]} from the copy's {label: version}."""
    if not isinstance(labels, dict) or not all(isinstance(v, (str, int)) for v in labels.values()):
        raise SourceError('labels: must map each label to a version, {"production": "3"}')
    by_version: dict[str, list[str]] = {}
    for name, number in labels.items():
        by_version.setdefault(str(number), []).append(label_name(name))
    return by_version


def _order(number: str) -> tuple[int, str]:
    return (int(number), "") if number.isdigit() else (1 << 62, number)


def _version(prompt_id: str, entry: Any, where: str) -> tuple[str, SourceVersion]:
    if not isinstance(entry, dict):
        raise SourceError(f"{where}: must be an object")
    number = entry.get("version")
    if not isinstance(number, (str, int)) or isinstance(number, bool) or str(number) == "":
        raise SourceError(f'{where}.version: must be the version, as OpenAI shows it ("3")')
    number = str(number)
    instructions = entry.get("instructions")
    if not isinstance(instructions, str) or not instructions:
        raise SourceError(f"{where}.instructions: must be the prompt's instructions (text)")
    origin: dict[str, Any] = {"system": "openai", "id": prompt_id, "version": number}
    texts, notes = _messages(entry, instructions, origin, where)
    tools, builtin = function_tools(entry.get("tools"), f"{where}.tools")
    if builtin:
        origin["tools"] = builtin
        notes.append(f"{len(builtin)} built-in tool(s) kept in metadata.imported_from.tools")
    text = entry.get("text") or {}
    if not isinstance(text, dict):
        raise SourceError(f"{where}.text: must be an object with a format")
    names = entry.get("variables") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SourceError(f"{where}.variables: must be a list of variable names")
    model = {str(_RENAMED.get(k, k)): v for k, v in entry.items() if k not in _VERSION_KEYS}
    ref = f"openai {prompt_id} version {number}"
    version = SourceVersion(
        ref=ref,
        content=content(
            system_prompt=instructions,
            origin=origin,
            tools=tools,
            output_schema=output_schema(text.get("format"), f"{where}.text.format"),
            model=model,
            variables=declared(texts, names),
        ),
        message=message(text=entry.get("message"), ref=ref, author=entry.get("author")),
        notes=tuple(notes),
    )
    return number, version


def _messages(
    entry: dict[str, Any], instructions: str, origin: dict[str, Any], where: str
) -> tuple[list[str], list[str]]:
    """(every text that may hold variables, notes); the prompt's messages go into `origin`."""
    messages = entry.get("messages") or []
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise SourceError(f"{where}.messages: must be a list of messages with role and content")
    if not messages:
        return [instructions], []
    origin["messages"] = messages
    texts = [instructions, *(m["content"] for m in messages if isinstance(m.get("content"), str))]
    return texts, [f"{len(messages)} prompt message(s) kept in metadata.imported_from.messages"]
