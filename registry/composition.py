"""Resolving a prompt's includes at publish (the syntax and the stored fields: registry.includes;
the design: docs/releases.md, "Composition").

registry.services.version_publish calls `content_resolved` before it canonicalises, so the
content hash covers the resolved text and the snippet versions it came from. Nothing here
writes; the reads are registry.selectors'. Errors name the field they are about:
`content.system_prompt` for a marker that names nothing, a cycle or too deep a chain (400),
403 for a snippet outside the key's scope (the same answer whether or not it exists)."""

import json
from typing import Any

from access.actors import Actor
from core.errors import Forbidden, InvalidContent
from core.limits import PROMPT_MAX_CHARS
from registry import includes, selectors
from registry.models import Bundle, BundleVersion, VersionState

PROMPT = "content.system_prompt"
# How many snippet versions one publish may read while it looks for a cycle through the
# snippets' own includes: MAX_INCLUDES at each of MAX_DEPTH levels could ask for 20^4 reads.
MAX_NESTED_READS = 100


def _invalid(message: str, field: str = PROMPT) -> InvalidContent:
    return InvalidContent(message, {field: [message]})


def content_resolved(*, content: object, bundle: Bundle, actor: Actor) -> object:
    """The content to canonicalise. Without markers (and without the stored fields) it is
    `content` itself, so such content keeps exactly the bytes it always had. A prompt with
    markers comes back resolved, with `system_prompt_source` and `includes`. A document that
    already carries them (an export being imported, a pulled version pushed back) is checked
    against the snippet versions it names and stored as it is: it pins them by hash."""
    if not isinstance(content, dict) or not isinstance(content.get("system_prompt"), str):
        return content  # canonicalise reports what is wrong with it
    if includes.FIELDS & set(content):
        _check_resolved(content, bundle=bundle, actor=actor)
        return content
    source: str = content["system_prompt"]
    found, problems = includes.markers(source)
    if problems:
        raise InvalidContent("The prompt's include markers are not valid.", {PROMPT: problems})
    if not found:
        return content
    _require_in_scope(actor, found)
    entries: list[dict[str, Any]] = []
    texts: dict[str, str] = {}
    for marker in found:
        version = _target(marker)
        _check_chain(version, bundle=bundle, marker=marker)
        texts[marker.text] = _prompt_of(version)
        pinned = {"version": version.number, "content_hash": version.content_hash}
        entries.append({"marker": marker.text, "bundle": marker.bundle, **pinned})
    resolved = includes.substitute(source, texts)
    if len(resolved) > PROMPT_MAX_CHARS:
        raise _invalid(f"With its includes the prompt is {len(resolved)} characters; the limit is {PROMPT_MAX_CHARS}.")
    return {**content, "system_prompt": resolved, "system_prompt_source": source, "includes": entries}


def _require_in_scope(actor: Actor, found: list[includes.Marker]) -> None:
    """Forbidden unless the key may read every included bundle: an include copies the snippet's
    text into this version, so it is a read. Decided on the names alone, before any lookup."""
    outside = [m for m in found if not actor.may_see_bundle(m.bundle)]
    if outside:
        raise Forbidden(
            f"Your key may only include bundles matching {', '.join(actor.scopes)}.",
            {PROMPT: [f"{m.text}: bundle {m.bundle!r} is outside this key's scopes." for m in outside]},
        )


def _target(marker: includes.Marker) -> BundleVersion:
    exists, version = selectors.include_target(bundle_name=marker.bundle, label=marker.ref, number=marker.number)
    if not exists:
        raise _invalid(f"{marker.text}: there is no bundle named {marker.bundle!r}.")
    if version is None:
        what = f"version {marker.number}" if marker.number is not None else f"label {marker.ref!r}"
        raise _invalid(f"{marker.text}: bundle {marker.bundle!r} has no {what}.")
    if version.state == VersionState.REVOKED:
        raise _invalid(f"{marker.text}: version {version.number} of {marker.bundle!r} is revoked.")
    return version


def _prompt_of(version: BundleVersion) -> str:
    # The snippet's stored prompt: already resolved if it has includes of its own, so nesting
    # needs no second pass here (and the inserted text is never scanned for markers).
    prompt = json.loads(bytes(version.canonical))["system_prompt"]
    assert isinstance(prompt, str)
    return prompt


def _check_chain(version: BundleVersion, *, bundle: Bundle, marker: includes.Marker) -> None:
    """Refuse a cycle (the snippet is this bundle, or includes it at any depth) and a chain of
    includes deeper than MAX_DEPTH. Walks the snippet versions' stored `includes`, each read once."""
    level: list[tuple[str, BundleVersion | None]] = [(marker.bundle, version)]
    seen: set[int] = set()
    for depth in range(1, includes.MAX_DEPTH + 2):
        if any(name == bundle.name for name, _ in level):
            raise _invalid(f"{marker.text}: including it would make a cycle: it is, or includes, {bundle.name!r}.")
        if depth > includes.MAX_DEPTH and level:
            raise _invalid(f"{marker.text}: includes nest deeper than {includes.MAX_DEPTH} levels.")
        below: list[tuple[str, BundleVersion | None]] = []
        for _, found in level:
            if found is None or found.pk in seen:
                continue
            seen.add(found.pk)
            if len(seen) > MAX_NESTED_READS:
                raise _invalid(f"{marker.text}: its snippets include more than {MAX_NESTED_READS} versions.")
            for entry in includes.entries_of(json.loads(bytes(found.canonical))):
                name, digest = str(entry.get("bundle")), str(entry.get("content_hash"))
                below.append((name, selectors.version_by_hash(bundle_name=name, content_hash=digest)))
        level = below
        if not level:
            return


def _check_resolved(content: dict[str, Any], *, bundle: Bundle, actor: Actor) -> None:
    """A document that carries its includes must be what its source gives with the snippet
    versions it names (by bundle and content hash), all present here: the version numbers it
    records are those of the registry that resolved it and may differ in this one."""
    errors: dict[str, list[str]] = {}
    includes.normalise(content, lambda path, message: errors.setdefault(path, []).append(message))
    if errors:
        raise InvalidContent("The includes of the content are not valid; see details.", errors)
    found, _ = includes.markers(content["system_prompt_source"])
    _require_in_scope(actor, found)
    texts: dict[str, str] = {}
    for i, entry in enumerate(content["includes"]):
        if entry["bundle"] == bundle.name:
            raise _invalid(f"{entry['marker']}: a bundle cannot include itself.", f"content.includes[{i}]")
        version = selectors.version_by_hash(bundle_name=entry["bundle"], content_hash=entry["content_hash"])
        if version is None:
            raise _invalid(
                f"Bundle {entry['bundle']!r} has no version with content hash {entry['content_hash']} here; "
                "import the included bundle first.",
                f"content.includes[{i}]",
            )
        texts[entry["marker"]] = _prompt_of(version)
    if includes.substitute(content["system_prompt_source"], texts) != content["system_prompt"]:
        raise _invalid(
            "The system_prompt is not its source with the included versions: publish the source "
            "(system_prompt set to system_prompt_source, without includes) to resolve it again."
        )
