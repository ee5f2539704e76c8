"""Composition: a system prompt that includes another bundle's prompt (docs/releases.md,
"Composition").

An author writes `{{> tone@production}}` (a label) or `{{> tone@3}}` (a version number) in
`system_prompt`. At publish, registry.composition resolves each marker to one version of that
bundle and puts its system prompt in place of the marker. The stored document then holds, all
under the content hash:

- `system_prompt`: the resolved text, what the model sees;
- `system_prompt_source`: the prompt as written, markers intact (what an editor shows and what
  an author publishes again to pick up a snippet's newer version);
- `includes`: `[{"marker", "bundle", "version", "content_hash"}]`, one entry per distinct marker
  in order of first appearance: the snippet version each marker resolved to, and its hash.

Both fields are present only when the source has a marker, so a document without includes
keeps exactly the bytes (and hash) it had before composition existed.

This module is pure (no database): the marker syntax, the two fields' rules for
registry.canonical, the one-pass substitution, the authoring form of a stored document, and
the diff of includes for registry.contracts.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.limits import PROMPT_MAX_CHARS

FIELDS = frozenset({"includes", "system_prompt_source"})
ENTRY_KEYS = frozenset({"marker", "bundle", "version", "content_hash"})
# Markers per prompt (every occurrence counts) and the longest chain of includes (a includes b
# includes c ...). Both bound the work one publish can ask for: each distinct marker is a read,
# and each level of nesting is a walk over the snippet's own includes.
MAX_INCLUDES = 20
MAX_DEPTH = 4
# Where a marker starts. Every occurrence must be a valid marker: a typo is an error, never
# text the model would see verbatim.
OPENER = "{{>"
# `{{> bundle@label}}` or `{{> bundle@3}}` (all digits: a version number, so a label named
# only with digits cannot be included by label). Bundle and label names as core.limits has them;
# the whitespace is bounded so that matching at any position costs a bounded amount.
MARKER_RE = re.compile(r"\{\{>\s{0,8}([a-z0-9][a-z0-9._-]{0,99})@([a-z0-9][a-z0-9_-]{0,49})\s{0,8}\}\}")
HASH_RE = re.compile(r"^[0-9a-f]{64}$")

Err = Callable[[str, str], None]


@dataclass(frozen=True)
class Marker:
    text: str  # as written, the key of its `includes` entry
    bundle: str
    ref: str  # a label name, or a version number in digits

    @property
    def number(self) -> int | None:
        return int(self.ref) if self.ref.isdigit() else None

    @property
    def key(self) -> str:
        """How paths and messages name it: `tone@production`."""
        return f"{self.bundle}@{self.ref}"


def marker_of(text: object) -> Marker | None:
    """The marker that `text` is, whole (an `includes` entry's key), or None."""
    match = MARKER_RE.fullmatch(text) if isinstance(text, str) else None
    return Marker(match.group(0), match.group(1), match.group(2)) if match else None


def _where(text: str, at: int) -> str:
    line = text.count("\n", 0, at) + 1
    return f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"


def markers(source: str) -> tuple[list[Marker], list[str]]:
    """The distinct markers of `source` in order of first appearance, and what is wrong
    (an opener that is not a marker, too many markers). Linear in the length of `source`."""
    count = source.count(OPENER)
    if count > MAX_INCLUDES:
        return [], [f"The prompt has {count} include markers; at most {MAX_INCLUDES}."]
    found: dict[str, Marker] = {}
    problems: list[str] = []
    at = source.find(OPENER)
    while at != -1:
        match = MARKER_RE.match(source, at)
        if match is None:
            problems.append(
                f"`{{{{>` at {_where(source, at)} does not start an include: write {{{{> bundle@label}}}} "
                "or {{> bundle@3}}."
            )
            at = source.find(OPENER, at + len(OPENER))
            continue
        found.setdefault(match.group(0), Marker(match.group(0), match.group(1), match.group(2)))
        at = source.find(OPENER, match.end())
    return list(found.values()), problems


def substitute(source: str, texts: dict[str, str]) -> str:
    """`source` with each marker replaced by `texts[marker]`, in one pass: the inserted text is
    never scanned again, so a snippet cannot smuggle in a marker of its own."""
    return MARKER_RE.sub(lambda m: texts[m.group(0)], source)


def normalise(content: dict[str, Any], err: Err) -> dict[str, Any]:
    """The two fields as they go into the canonical document (only when present), reporting
    problems through `err(path, message)` as registry.canonical does. Checks their shape and
    that they agree with each other; registry.composition checks them against the registry."""
    if not FIELDS & set(content):
        return {}
    source, entries = content.get("system_prompt_source"), content.get("includes")
    doc = {"system_prompt_source": source, "includes": entries}
    if not isinstance(source, str) or not 1 <= len(source) <= PROMPT_MAX_CHARS:
        err("content.system_prompt_source", f"Must be the prompt as written, 1 to {PROMPT_MAX_CHARS} characters.")
        return doc
    found, problems = markers(source)
    for problem in problems:
        err("content.system_prompt_source", problem)
    if not found and not problems:
        err("content.system_prompt_source", "Has no include marker: publish the prompt without includes.")
    if not isinstance(entries, list) or len(entries) != len(found):
        err("content.includes", f"Must list one entry per distinct marker of system_prompt_source ({len(found)}).")
        return doc
    for i, (entry, marker) in enumerate(zip(entries, found, strict=True)):
        wrong = _entry_problem(entry, marker)
        if wrong:
            err(f"content.includes[{i}]", wrong)
    return doc


def _entry_problem(entry: Any, marker: Marker) -> str | None:
    if not isinstance(entry, dict) or set(entry) != ENTRY_KEYS:
        return f"Must be an object with {', '.join(sorted(ENTRY_KEYS))}."
    if entry["marker"] != marker.text or entry["bundle"] != marker.bundle:
        return f"Must be the entry of {marker.text} (markers in order of first appearance)."
    version = entry["version"]
    # A version number is a positive 32-bit integer (BundleVersion.number, as registry.transfer
    # checks an export's numbers): a larger one names no version in any registry.
    if isinstance(version, bool) or not isinstance(version, int) or not 0 < version < 2**31:
        return "version must be a version number."
    if marker.number is not None and version != marker.number:
        return f"{marker.text} names version {marker.number}."
    if not isinstance(entry["content_hash"], str) or not HASH_RE.match(entry["content_hash"]):
        return "content_hash must be a SHA-256 in lower-case hex."
    return None


def source_of(content: dict[str, Any]) -> dict[str, Any]:
    """The authoring form of a stored document: the prompt as written (markers intact) and no
    resolved fields. Publishing it resolves every marker again: the same version while no
    snippet moved, a new one that picks up the snippets' current versions otherwise."""
    if not isinstance(content.get("system_prompt_source"), str):
        return content
    authored = {k: v for k, v in content.items() if k not in FIELDS}
    authored["system_prompt"] = content["system_prompt_source"]
    return authored


def entries_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored document's include entries (none for a document without includes)."""
    entries = doc.get("includes")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


# Compatibility (rows of registry.contracts.COMPATIBILITY_RULES): an include is prompt wording,
# so its changes are patches, like prompt_changed, which the resolved text reports as well.
COMPATIBILITY_RULES: list[tuple[str, str, str]] = [
    ("include_added", "patch", "The prompt includes another snippet (a bundle's prompt, pinned by hash)."),
    ("include_removed", "patch", "The prompt no longer includes a snippet."),
    (
        "include_changed",
        "patch",
        "An included snippet resolved to another version or other bytes: its text in the prompt changed.",
    ),
]


def _pinned(entry: dict[str, Any]) -> str:
    return f"version {entry.get('version')} ({str(entry.get('content_hash'))[:12]})"


def _name(marker: Any, entry: dict[str, Any]) -> str:
    match = MARKER_RE.fullmatch(marker) if isinstance(marker, str) else None
    return f"{match.group(1)}@{match.group(2)}" if match else str(entry.get("bundle"))


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, path, message) for each include added, removed or resolved to other bytes."""
    before = {e.get("marker"): e for e in entries_of(old)}
    after = {e.get("marker"): e for e in entries_of(new)}
    changes: list[tuple[str, str, str]] = []
    for marker, entry in after.items():
        name = _name(marker, entry)
        path = f"includes[{name}]"
        was = before.get(marker)
        if was is None:
            changes.append(("include_added", path, f"The prompt includes {name}, {_pinned(entry)}."))
        elif was.get("content_hash") != entry.get("content_hash") or was.get("version") != entry.get("version"):
            changes.append(("include_changed", path, f"{name} moved from {_pinned(was)} to {_pinned(entry)}."))
    for marker, entry in before.items():
        if marker not in after:
            name = _name(marker, entry)
            changes.append(("include_removed", f"includes[{name}]", f"The prompt no longer includes {name}."))
    return changes
