"""The model's file tools over a session's knowledge packs: ls, glob, grep, read.

They see only the packs the session's pinned version lists that the caller's key may see
(knowledge.selectors.packs_reachable; any other listed pack answers as one that does not exist),
under the paths the model sees (`knowledge/<pack>/<path>`). Every answer is text for the model,
at most 100 KB, ending with a line that says so when it was cut and which offset continues it. `read` records what the
session read (path and SHA-256) so that a later render can tell it the file changed.

Every parameter is bounded before any work (docs/rendering.md#the-models-file-tools): paths by
knowledge.paths, offsets and limits to 9 digits, grep patterns and globs by core.patterns
(length, nesting, counted repeats, compiled size), and both run on RE2, which matches in linear
time and releases the GIL, under a deadline checked between files and between 64 KB blocks."""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import re2
from django.db.models import Q
from django.utils import timezone

from access.actors import Actor
from core import patterns
from core.errors import InvalidContent, NotFound
from core.limits import normal_name
from knowledge import paths
from knowledge.models import FileRead, Pack, PackFile
from knowledge.selectors import packs_reachable
from registry.parsed_content import content_document
from sessions_app.models import Session
from sessions_app.services import session_use

MAX_ANSWER_BYTES = 100_000
READ_DEFAULT_LIMIT = 2000
MAX_READ_LINE_CHARS = 2000
MAX_GREP_LINE_CHARS = 500
MAX_GREP_MATCHES = 20_000
GREP_TIME_LIMIT_SECONDS = 2.0  # for the whole search, checked between files and blocks
GREP_BLOCK_BYTES = 64 * 1024  # one RE2 search covers at most this much text (whole lines when they fit)
GLOB_TIME_LIMIT_SECONDS = 1.0
MAX_GLOB_MATCHES = 20_000
MAX_GLOB_CHARS = 1024
MAX_GLOB_STARS = 32  # `*` and `**` together
MAX_GLOB_DOUBLE_STARS = 8
MAX_GLOB_SEGMENTS = 64
MAX_GLOB_ALTERNATIVES = 64  # `{a,b,...}` choices over the whole pattern
MAX_NUMBER_DIGITS = 9  # offset and limit


@dataclass(frozen=True)
class Answer:
    output: str
    truncated: bool


@dataclass(frozen=True)
class _Scope:
    session: Session
    packs: dict[str, int]  # listed, existing and within the key's scopes: name -> id
    listed: list[str]  # as the version lists them


def _scope(*, session_id: Any, actor: Actor) -> _Scope:
    session = session_use(session_id=session_id, actor=actor)
    content = content_document(version_id=session.version.pk, content_hash=session.version.content_hash)
    listed = list(content.get("knowledge") or [])
    reachable = packs_reachable(listed, actor)  # listed and within the key's scopes
    packs = dict(Pack.objects.filter(name__in=reachable).values_list("name", "pk")) if reachable else {}
    return _Scope(session=session, packs=packs, listed=listed)


def _pack_id(scope: _Scope, pack: str) -> int:
    if pack not in scope.packs:
        raise NotFound(f"{paths.model_path(pack, '')} does not exist.")
    return scope.packs[pack]


def _page(entries: list[str], *, offset: int, what: str, notes: Iterable[str] = ()) -> Answer:
    """Entries from `offset` (1-based) until the 100 KB cap, with a last line saying how to page on."""
    total = len(entries)
    if offset > max(total, 1):
        return Answer(f"[offset {offset} is past the end: there are {total} {what}]", False)
    out: list[str] = []
    size = 0
    last = offset - 1
    for entry in entries[offset - 1 :]:
        cost = len(entry.encode()) + 1
        if size + cost > MAX_ANSWER_BYTES - 200:  # room for the closing line
            break
        out.append(entry)
        size += cost
        last += 1
    truncated = last < total
    if truncated:
        out.append(
            f"[cut at 100 KB: {what} {offset}-{last} of {total} shown; call again with offset={last + 1} for more]"
        )
    out.extend(notes)
    return Answer("\n".join(out), truncated)


def _check_offset(value: Any, name: str = "offset") -> int:
    if value is None or value == "":
        return 1
    try:
        number = int(value) if len(str(value)) <= MAX_NUMBER_DIGITS else 0
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise InvalidContent(
            f"{name} must be a whole number from 1 to 999999999.", {name: ["A whole number from 1 to 999999999."]}
        )
    return number


def _dir_paths(pack_id: int, rel: str) -> list[str]:
    files = PackFile.objects.filter(pack_id=pack_id)
    if rel:
        files = files.filter(path__startswith=f"{rel}/")
    return list(files.values_list("path", flat=True))


def ls(*, session_id: Any, actor: Actor, path: Any = None, offset: Any = None) -> Answer:
    scope = _scope(session_id=session_id, actor=actor)
    start = _check_offset(offset)
    where = paths.parse_model_path(path if path else f"{paths.ROOT}/", packs=scope.listed)
    if where.pack is None:
        entries = [paths.model_path(name, "") for name in sorted(scope.packs)]
        return _page(entries, offset=start, what="entries") if entries else Answer("(no knowledge files)", False)
    pack_id = _pack_id(scope, where.pack)
    found = _dir_paths(pack_id, where.rel)
    if not found:
        if where.rel and PackFile.objects.filter(pack_id=pack_id, path=where.rel).exists():
            return Answer(paths.model_path(where.pack, where.rel), False)
        if not where.rel:
            return Answer("(empty folder)", False)
        raise NotFound(f"{paths.model_path(where.pack, where.rel)} does not exist.")
    base = f"{where.rel}/" if where.rel else ""
    children: set[str] = set()
    for file_path in found:
        head, sep, _ = file_path[len(base) :].partition("/")
        children.add(paths.model_path(where.pack, base + head) + ("/" if sep else ""))
    return _page(sorted(children), offset=start, what="entries")


def glob_regex(pattern: str) -> str:
    """A glob pattern as a regular expression over whole paths (`**` crosses folders)."""
    out: list[str] = []
    i = 0
    in_braces = False
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re2.escape(c))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif c == "{" and not in_braces:
            in_braces = True
            out.append("(?:")
        elif c == "}" and in_braces:
            in_braces = False
            out.append(")")
        elif c == "," and in_braces:
            out.append("|")
        else:
            out.append(re2.escape(c))
        i += 1
    if in_braces:
        raise InvalidContent("The pattern has an unclosed {.", {"pattern": ["Close every { with }."]})
    return "".join(out)


def _glob_problem(pattern: Any) -> str | None:
    """Why a glob pattern is refused before it is turned into a regex, or None."""
    if not isinstance(pattern, str) or not pattern:
        return "A pattern is required."
    if len(pattern) > MAX_GLOB_CHARS:
        return f"The pattern has {len(pattern)} characters: at most {MAX_GLOB_CHARS}."
    doubles = pattern.count("**")
    stars = pattern.count("*") - doubles
    if stars > MAX_GLOB_STARS or doubles > MAX_GLOB_DOUBLE_STARS:
        return (
            f"The pattern has {stars} wildcards (* and **), {doubles} of them **: "
            f"at most {MAX_GLOB_STARS}, {MAX_GLOB_DOUBLE_STARS} of them **."
        )
    if pattern.count("/") + 1 > MAX_GLOB_SEGMENTS:
        return f"The pattern has {pattern.count('/') + 1} folder levels: at most {MAX_GLOB_SEGMENTS}."
    if pattern.count(",") + pattern.count("{") > MAX_GLOB_ALTERNATIVES:
        return f"The pattern has too many {{a,b}} choices: at most {MAX_GLOB_ALTERNATIVES}."
    return None


def glob(*, session_id: Any, actor: Actor, pattern: Any = None, offset: Any = None) -> Answer:
    scope = _scope(session_id=session_id, actor=actor)
    start = _check_offset(offset)
    refused = _glob_problem(pattern)
    if refused:
        raise InvalidContent(refused, {"pattern": [refused if pattern else "For example knowledge/**/*.md."]})
    assert isinstance(pattern, str)
    pattern = normal_name(pattern)  # paths are stored NFC (knowledge.paths): match them as such
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise InvalidContent(
            "Absolute patterns and '..' are not allowed.", {"pattern": ["Patterns start with knowledge/."]}
        )
    head = pattern.split("/", 2)
    if head[0] not in (paths.ROOT, "**"):
        raise InvalidContent(
            "The pattern is outside the knowledge files.", {"pattern": ["Start it with knowledge/ (or **/)."]}
        )
    names = list(scope.packs)
    if head[0] == paths.ROOT and len(head) > 1 and not any(c in head[1] for c in "*?[{"):
        paths.parse_model_path(f"{paths.ROOT}/{head[1]}/", packs=scope.listed)  # 400 outside the session's packs
        names = [head[1]] if head[1] in scope.packs else []
    if not names:
        return Answer("(no files match)", False)  # nothing to match: the pattern is not even compiled
    try:
        compiled = patterns.compile_bounded(glob_regex(pattern), patterns.GLOB)
    except patterns.PatternRefused as exc:
        raise InvalidContent(f"The glob pattern cannot be used: {exc}", {"pattern": [str(exc)]}) from None
    matches, notes = _glob_matches(compiled, [scope.packs[n] for n in names])
    if not matches and not notes:
        return Answer("(no files match)", False)
    return _page(sorted(matches), offset=start, what="matches", notes=notes)


def _glob_matches(compiled: Any, pack_ids: list[int]) -> tuple[list[str], list[str]]:
    """The model paths of the packs' files that `compiled` matches, within the time and count
    bounds, and the notes saying where it stopped."""
    candidates = PackFile.objects.filter(pack_id__in=pack_ids).values_list("pack__name", "path").order_by()
    deadline = time.monotonic() + GLOB_TIME_LIMIT_SECONDS
    matches: list[str] = []
    notes: list[str] = []
    for count, (pack, file_path) in enumerate(candidates.iterator(chunk_size=2000)):
        if count % 256 == 0 and time.monotonic() > deadline:
            notes.append(f"[stopped after {GLOB_TIME_LIMIT_SECONDS:g} s: simplify the pattern]")
            break
        full = paths.model_path(pack, file_path)
        if compiled.fullmatch(full) is not None:
            matches.append(full)
            if len(matches) >= MAX_GLOB_MATCHES:
                notes.append(f"[stopped at {MAX_GLOB_MATCHES} matching files: narrow the pattern]")
                break
    return matches, notes


def grep(*, session_id: Any, actor: Actor, pattern: Any = None, path: Any = None, offset: Any = None) -> Answer:
    scope = _scope(session_id=session_id, actor=actor)
    start = _check_offset(offset)
    refused = patterns.problem(pattern, patterns.GREP)
    if refused:
        raise InvalidContent(refused, {"pattern": [refused if pattern else "A regular expression."]})
    where = paths.parse_model_path(path if path else f"{paths.ROOT}/", packs=scope.listed)
    if not scope.packs:
        return Answer("(no knowledge files)", False)  # nothing to search: the pattern is not even compiled
    try:
        compiled = patterns.compile_bounded(pattern, patterns.GREP, flags="(?m)")
    except patterns.PatternRefused as exc:
        raise InvalidContent(str(exc), {"pattern": [str(exc)]}) from None
    if where.pack is None:
        files = PackFile.objects.filter(pack_id__in=list(scope.packs.values()))
    else:
        pack_id = _pack_id(scope, where.pack)
        files = PackFile.objects.filter(pack_id=pack_id)
        if where.rel:
            files = files.filter(Q(path=where.rel) | Q(path__startswith=f"{where.rel}/"))
            if not files.exists():
                raise NotFound(f"{paths.model_path(where.pack, where.rel)} does not exist.")
    rows = files.values_list("pack__name", "path", "content").order_by("pack__name", "path")
    deadline = time.monotonic() + GREP_TIME_LIMIT_SECONDS
    found: list[str] = []
    notes: list[str] = []
    for pack, file_path, text in rows.iterator(chunk_size=16):  # files of up to 1 MiB each
        if not _grep_file(compiled, text, paths.model_path(pack, file_path), found, deadline):
            notes.append(
                f"[stopped after {GREP_TIME_LIMIT_SECONDS:g} s: the search took too long; the matches above are "
                "not all of them. Narrow the path or simplify the pattern]"
            )
            break
        if len(found) >= MAX_GREP_MATCHES:
            notes.append(f"[stopped at {MAX_GREP_MATCHES} matching lines: narrow the path or the pattern]")
            break
    if not found and not notes:
        return Answer("(no matches)", False)
    return _page(found, offset=start, what="matching lines", notes=notes)


def _grep_file(compiled: Any, text: str, shown: str, found: list[str], deadline: float) -> bool:
    """Append `shown:line:text` for each line where a match starts; False when the deadline
    passed first. The text is searched as UTF-8 in blocks of whole lines (a line longer than a
    block is cut into blocks), one RE2 call per block and matching line, so the time between
    two deadline checks is bounded; a match cannot span two blocks."""
    data = text.encode()
    size = len(data)
    line = 1  # the number of the line at `counted`
    counted = 0
    block = 0
    while block < size:
        if time.monotonic() > deadline:
            return False
        end = min(block + GREP_BLOCK_BYTES, size)
        if end < size:
            newline = data.rfind(b"\n", block, end)
            end = newline + 1 if newline != -1 else end
        pos = block
        while pos < end:
            match = compiled.search(data, pos, end)
            if match is None:
                break
            begin = match.start()
            line += data.count(b"\n", counted, begin)
            counted = begin
            first = data.rfind(b"\n", 0, begin) + 1
            last = data.find(b"\n", begin)
            last = size if last == -1 else last
            shown_line = data[first:last].decode(errors="replace")
            if len(shown_line) > MAX_GREP_LINE_CHARS:
                shown_line = shown_line[:MAX_GREP_LINE_CHARS] + " [line cut]"
            found.append(f"{shown}:{line}:{shown_line}")
            if len(found) >= MAX_GREP_MATCHES:
                return True
            pos = last + 1  # one entry per line: go on at the next one
        block = max(end, pos)  # past the end of a long line already shown
    return True


def read(*, session_id: Any, actor: Actor, path: Any = None, offset: Any = None, limit: Any = None) -> Answer:
    scope = _scope(session_id=session_id, actor=actor)
    first = _check_offset(offset)
    count = _check_offset(limit, "limit") if limit not in (None, "") else READ_DEFAULT_LIMIT
    where = paths.parse_model_path(path, packs=scope.listed)
    if where.pack is None or not where.rel:
        raise InvalidContent("That is a folder: list it with ls.", {"path": ["A file path as ls or glob gave it."]})
    pack_id = _pack_id(scope, where.pack)
    file = PackFile.objects.filter(pack_id=pack_id, path=where.rel).only("content", "sha256").first()
    shown = paths.model_path(where.pack, where.rel)
    if file is None:
        if PackFile.objects.filter(pack_id=pack_id, path__startswith=f"{where.rel}/").exists():
            raise InvalidContent(f"{shown} is a folder: list it with ls.", {"path": ["A file, not a folder."]})
        raise NotFound(f"{shown} does not exist.")
    _record_read(scope.session, pack_id, where.rel, file.sha256)
    return _numbered(file.content, first=first, count=count)


def _record_read(session: Session, pack_id: int, rel: str, digest: str) -> None:
    FileRead.objects.bulk_create(
        [FileRead(session=session, pack_id=pack_id, path=rel, known_sha256=digest, read_at=timezone.now())],
        update_conflicts=True,
        unique_fields=["session", "pack", "path"],
        update_fields=["known_sha256", "read_at"],
    )


def _numbered(text: str, *, first: int, count: int) -> Answer:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    total = len(lines)
    if total == 0:
        return Answer("(empty file)", False)
    if first > total:
        return Answer(f"[offset {first} is past the end: the file has {total} lines]", False)
    out: list[str] = []
    size = 0
    last = first - 1
    for number in range(first, min(first + count, total + 1)):
        line = lines[number - 1]
        if len(line) > MAX_READ_LINE_CHARS:
            line = line[:MAX_READ_LINE_CHARS] + " [line cut]"
        entry = f"{number:6}\t{line}"
        cost = len(entry.encode()) + 1
        if size + cost > MAX_ANSWER_BYTES - 200:
            break
        out.append(entry)
        size += cost
        last = number
    if last < min(first + count - 1, total):
        out.append(f"[cut at 100 KB: lines {first}-{last} of {total} shown; read again with offset={last + 1}]")
        return Answer("\n".join(out), True)
    if last < total:
        out.append(f"[lines {first}-{last} of {total} shown; read on with offset={last + 1}]")
    return Answer("\n".join(out), False)


Tool = Callable[..., Answer]
TOOLS: dict[str, Tool] = {"ls": ls, "glob": glob, "grep": grep, "read": read}
