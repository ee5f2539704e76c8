"""Path rules, for the files of a pack and for the paths the model sees (`knowledge/<pack>/...`).

A pack file path is relative and already normalised: segments separated by single `/`, none
empty, `.` or `..`, no leading or trailing `/`, no backslash, control, bidi or other invisible
character (core.limits.invisible_characters), at most 512 bytes of UTF-8. Anything else is
refused (400) rather than silently rewritten, so that the path a sync tool PUTs is the path the
manifest lists. The one rewrite is Unicode NFC (core.limits.normal_name), applied to every path
written and every path looked up (REST, admin and the model's), so that two paths that look
the same are one path: a file PUT as "cafe\u0301.md" is stored, listed and found as "caf\u00e9.md"."""

import re
from dataclasses import dataclass

from core.errors import InvalidContent
from core.limits import invisible_characters, normal_name
from knowledge.models import MAX_PATH_BYTES

ROOT = "knowledge"
DUTY = "DUTY.md"
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def invisible_problem(path: str) -> str | None:
    """Why `path` holds a character that could make it look like another path, or None."""
    found = invisible_characters(path)
    return f"May not contain invisible, bidi or control characters ({', '.join(found)})." if found else None


def lookup_path(path: str) -> str:
    """A path as it is looked up: NFC, like every path that was written."""
    return normal_name(path)


def path_problem(path: str) -> str | None:
    """Why `path` (NFC) is not a valid pack file path, or None."""
    if not path:
        return "A path is required."
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"At most {MAX_PATH_BYTES} bytes of UTF-8."
    if path.startswith("/"):
        return "Must be relative (no leading /)."
    if _CONTROL.search(path):
        return "May not contain a backslash or control characters."
    invisible = invisible_problem(path)
    if invisible:
        return invisible
    segments = path.split("/")
    if ".." in segments:
        return "May not contain '..'."
    if any(s in ("", ".") for s in segments):
        return "Must be normalised: no empty or '.' segments and no trailing /."
    return None


def check_file_path(path: str) -> str:
    """The path as it is stored (NFC), or 400 naming what is wrong with it."""
    path = normal_name(path)
    problem = path_problem(path)
    if problem:
        raise InvalidContent(f"The path is not valid: {problem}", {"path": [problem]})
    return path


def domain_of(path: str) -> str:
    """The top-level folder of a file ('' for a file at the pack's top level)."""
    head, sep, _ = path.partition("/")
    return head if sep else ""


def is_duty(path: str) -> bool:
    """A domain's curated entry point: DUTY.md directly inside a top-level folder."""
    parts = path.split("/")
    return len(parts) == 2 and parts[1] == DUTY


@dataclass(frozen=True)
class ModelPath:
    """A path as the model gives it: `knowledge/`, `knowledge/<pack>/` or `knowledge/<pack>/<rel>`."""

    pack: str | None  # None: the knowledge/ root itself
    rel: str  # within the pack, without trailing slash ('' for the pack's root)


def parse_model_path(raw: str, *, packs: list[str]) -> ModelPath:
    """Parse a path the model passed to a file tool; 400 for `..`, absolute paths and anything
    outside the session's packs (whether or not such a pack exists)."""
    if not isinstance(raw, str) or not raw:
        raise InvalidContent("A path is required.", {"path": ["Give a path under knowledge/."]})
    if len(raw.encode()) > MAX_PATH_BYTES + 200:
        raise InvalidContent("The path is too long.", {"path": [f"At most {MAX_PATH_BYTES} bytes below the pack."]})
    if raw.startswith("/"):
        raise InvalidContent(
            "Absolute paths are not allowed.", {"path": ["Pass the path exactly as ls or glob returned it."]}
        )
    if _CONTROL.search(raw):
        raise InvalidContent("The path is not valid.", {"path": ["No backslash or control characters."]})
    invisible = invisible_problem(raw)
    if invisible:
        raise InvalidContent("The path is not valid.", {"path": [invisible]})
    stripped = normal_name(raw).rstrip("/")
    segments = stripped.split("/")
    if ".." in segments:
        raise InvalidContent("'..' is not allowed in a path.", {"path": ["Pass the path exactly as ls returned it."]})
    if any(s in ("", ".") for s in segments):
        raise InvalidContent("The path is not normalised.", {"path": ["No empty or '.' segments."]})
    if segments[0] != ROOT:
        raise InvalidContent(
            f"The path is outside the knowledge files: paths start with {ROOT}/.",
            {"path": [f"Start at {ROOT}/ (try ls {ROOT}/)."]},
        )
    if len(segments) == 1:
        return ModelPath(pack=None, rel="")
    if segments[1] not in packs:
        raise InvalidContent(
            f"{ROOT}/{segments[1]}/ is not one of this session's knowledge packs.",
            {"path": [f"This session's packs: {', '.join(f'{ROOT}/{p}/' for p in packs) or 'none'}."]},
        )
    rel = "/".join(segments[2:])
    if rel and len(rel.encode()) > MAX_PATH_BYTES:
        raise InvalidContent("The path is too long.", {"path": [f"At most {MAX_PATH_BYTES} bytes below the pack."]})
    return ModelPath(pack=segments[1], rel=rel)


def model_path(pack: str, rel: str) -> str:
    return f"{ROOT}/{pack}/{rel}" if rel else f"{ROOT}/{pack}/"
