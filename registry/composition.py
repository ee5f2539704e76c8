"""Resolving a prompt's includes at publish (the syntax and the stored fields: registry.includes;
the design: docs/releases.md, "Composition").

registry.services.version_publish calls `content_resolved` before it canonicalises, so the
content hash covers the resolved text and the snippet versions it came from. Nothing here
writes; the reads are registry.selectors'. Errors name the field they are about:
`content.system_prompt` for a marker that names nothing, a cycle or too deep a chain (400),
403 for a snippet outside the key's scope (the same answer whether or not it exists)."""

import json
from dataclasses import dataclass
from typing import Any

from access.actors import Actor
from core.errors import Forbidden, InvalidContent
from core.limits import PROMPT_MAX_CHARS
from core.newlines import lf_all
from registry import includes, selectors
from registry.models import Bundle, BundleVersion, VersionState

PROMPT = "content.system_prompt"
# How many snippet versions one publish may visit, over all its markers together, while it looks
# for a cycle through the snippets' own includes: MAX_INCLUDES at each of MAX_DEPTH levels could
# otherwise ask for 20^4. The walk reads the include edges one level at a time (one query per
# level), so a publish makes at most MAX_DEPTH such queries whatever the fan-out.
MAX_NESTED_READS = 100


def _invalid(message: str, field: str = PROMPT) -> InvalidContent:
    return InvalidContent(message, {field: [message]})


def content_resolved(*, content: object, bundle: Bundle, actor: Actor) -> object:
    """The content to canonicalise. Without markers (and without the stored fields) it is
    `content` itself, so such content keeps exactly the bytes it always had. A prompt with
    markers comes back resolved, with `system_prompt_source` and `includes`. A document that
    already carries them (an export being imported, a pulled version pushed back) is checked
    against the snippet versions it names and stored as it is: it pins them by hash.

    First every string's line endings become `\n` (core.newlines), whichever way the content
    came (the admin's CRLF textareas, the API, an importer, `promptreg push` of CRLF files), so
    equal text has equal bytes and the same-content rule sees a re-save as no change."""
    content = lf_all(content)
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
    targets = [_Snippet(marker.text, marker.bundle, PROMPT, _target(marker)) for marker in found]
    _check_snippets(targets, bundle=bundle)
    texts: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    for target in targets:
        texts[target.marker] = _prompt_of(target.version)
        pinned = {"version": target.version.number, "content_hash": target.version.content_hash}
        entries.append({"marker": target.marker, "bundle": target.bundle, **pinned})
    resolved = includes.substitute(source, texts)
    if len(resolved) > PROMPT_MAX_CHARS:
        raise _invalid(f"With its includes the prompt is {len(resolved)} characters; the limit is {PROMPT_MAX_CHARS}.")
    return {**content, "system_prompt": resolved, "system_prompt_source": source, "includes": entries}


def content_pinned(*, content: object, bundle: Bundle, actor: Actor) -> None:
    """For content stored as it is (an import, whose bytes were verified against their hash):
    a document that carries `includes` gets the very check a publish of the same document gets
    (_check_resolved: its text is its source with the pinned snippet versions, which are here
    and readable by the key, with no cycle and no chain too deep), so an import cannot forge a
    composition (provenance and the dependents list) that a publish would refuse. The one
    difference is history's: a pinned snippet version revoked since is accepted, as the version
    that pinned it was published before the revocation. Content without those fields is not
    resolved or refused for its text: a literal `{{>` in a version an older release stored is
    only text."""
    if not isinstance(content, dict) or not includes.FIELDS & set(content):
        return
    _check_resolved(content, bundle=bundle, actor=actor, revoked_ok=True)


def _pinned_version(entry: dict[str, Any], i: int) -> BundleVersion:
    version = selectors.version_by_hash(bundle_name=entry["bundle"], content_hash=entry["content_hash"])
    if version is None:
        raise _invalid(
            f"Bundle {entry['bundle']!r} has no version with content hash {entry['content_hash']} here; "
            "import the included bundle first.",
            f"content.includes[{i}]",
        )
    return version


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
    return version


def _prompt_of(version: BundleVersion) -> str:
    # The snippet's stored prompt: already resolved if it has includes of its own, so nesting
    # needs no second pass here (and the inserted text is never scanned for markers). The only
    # parse of a snippet's bytes: the walk below reads the include edges instead.
    prompt = json.loads(bytes(version.canonical))["system_prompt"]
    assert isinstance(prompt, str)
    return prompt


@dataclass(frozen=True)
class _Snippet:
    marker: str  # the marker as written, which messages name
    bundle: str
    field: str  # where an error about it goes: the prompt, or its entry of a stored `includes`
    version: BundleVersion


def _check_snippets(targets: list[_Snippet], *, bundle: Bundle, revoked_ok: bool = False) -> None:
    """The rules for the snippet versions a prompt includes, the same whether publish resolved
    the markers or the document came resolved (an export, a pulled version pushed back): none
    is revoked, none is `bundle` or includes it at any depth (a cycle), and no chain of includes
    is deeper than MAX_DEPTH. One budget of MAX_NESTED_READS versions for all the markers, and
    one query per level over the include edges (registry.models.Include), never the bytes: every
    version with includes has its edges (version_publish writes them, migration 0012 backfilled
    the older ones)."""
    for target in targets:
        if target.version.state == VersionState.REVOKED and not revoked_ok:
            what = f"version {target.version.number} of {target.bundle!r}"
            raise _invalid(f"{target.marker}: {what} is revoked.", target.field)
    # Each node: (its bundle's id, its version's id or None when this registry lacks the pinned
    # version, the target it was reached from). The first target to reach a version owns it.
    level: list[tuple[int, int | None, _Snippet]] = [(t.version.bundle_id, t.version.pk, t) for t in targets]
    seen: set[int] = set()
    for depth in range(1, includes.MAX_DEPTH + 2):
        for bundle_id, _, origin in level:
            if bundle_id == bundle.pk:
                raise _invalid(
                    f"{origin.marker}: including it would make a cycle: it is, or includes, {bundle.name!r}.",
                    origin.field,
                )
        if depth > includes.MAX_DEPTH and level:
            origin = level[0][2]
            raise _invalid(f"{origin.marker}: includes nest deeper than {includes.MAX_DEPTH} levels.", origin.field)
        # Deduplicated within a level only: a version reached again deeper (a diamond) is walked
        # again from there, or a chain too deep along the longer path would go unseen. Versions
        # pin older versions, so the walk ends, and it is at most MAX_DEPTH + 1 levels of at
        # most MAX_NESTED_READS distinct versions.
        fresh: dict[int, _Snippet] = {}
        for _, version_id, origin in level:
            if version_id is not None:
                fresh.setdefault(version_id, origin)
        seen.update(fresh)
        if len(seen) > MAX_NESTED_READS:
            origin = next(iter(fresh.values()))
            raise _invalid(
                f"{origin.marker}: with their own includes, this prompt's snippets reach more than "
                f"{MAX_NESTED_READS} versions.",
                origin.field,
            )
        if not fresh:
            return
        level = [
            (snippet_id, pinned_id, fresh[version_id])
            for version_id, snippet_id, pinned_id in selectors.include_edges_of(version_ids=list(fresh))
        ]
        if not level:
            return


def _check_resolved(content: dict[str, Any], *, bundle: Bundle, actor: Actor, revoked_ok: bool = False) -> None:
    """A document that carries its includes must be what its source gives with the snippet
    versions it names (by bundle and content hash), all present here, and must obey the rules a
    fresh resolution does (_check_snippets): the version numbers it records are those of the
    registry that resolved it and may differ in this one."""
    errors: dict[str, list[str]] = {}
    includes.normalise(content, lambda path, message: errors.setdefault(path, []).append(message))
    if errors:
        raise InvalidContent("The includes of the content are not valid; see details.", errors)
    found, _ = includes.markers(content["system_prompt_source"])
    _require_in_scope(actor, found)
    targets: list[_Snippet] = []
    for i, entry in enumerate(content["includes"]):
        version = _pinned_version(entry, i)
        targets.append(_Snippet(entry["marker"], entry["bundle"], f"content.includes[{i}]", version))
    _check_snippets(targets, bundle=bundle, revoked_ok=revoked_ok)
    texts = {target.marker: _prompt_of(target.version) for target in targets}
    if includes.substitute(content["system_prompt_source"], texts) != content["system_prompt"]:
        raise _invalid(
            "The system_prompt is not its source with the included versions: publish the source "
            "(system_prompt set to system_prompt_source, without includes) to resolve it again."
        )
