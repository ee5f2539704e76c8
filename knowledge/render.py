"""The per-turn render of a session: a cache-stable prefix and a volatile tail (docs/rendering.md).

The prefix is a pure function of the pinned version, the session's variables, the set of
knowledge domains of its packs and their DUTY.md texts, for the listed packs the caller's key
may see (knowledge.selectors.packs_reachable): nothing else may reach it (no date,
no file list, no counts), because providers bill a repeated prefix at a fraction of the price
only while it stays byte-identical. Everything volatile (date and time, turn variables,
change notices) goes to the tail.

Rendering is a per-turn call, so the prefix is cached per process by
(content hash, session variables, each pack's prefix_state); a hit costs one small query for
the packs' states (none for a version without packs) plus the session read the pinned fetch
does anyway."""

import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from cachetools import LRUCache
from django.db import connection
from django.utils import timezone

from access.actors import Actor
from core.errors import InvalidContent
from knowledge import paths
from knowledge.models import FileRead
from knowledge.selectors import packs_reachable
from registry import variables as content_variables
from registry.canonical import canonical_bytes
from registry.parsed_content import content_document
from sessions_app.models import Session
from sessions_app.turns import UNREAD, Loaded, session_for_turn

DUTY_LIMIT_BYTES = 32 * 1024
PREFIX_CACHE_SIZE = 512
PREFIX_CACHE_BYTES = 64 * 1024 * 1024  # per web process

GUIDANCE = """\
# Knowledge files

Your team's knowledge (runbooks, architecture notes, postmortems, ...) is in files under \
`knowledge/`, one folder per pack and, inside it, one folder per domain. Discover them the way \
you would explore a code repository: `ls` a folder, `glob` for file names (for example \
`knowledge/**/*.md`), `grep` for words or patterns, then `read` what looks relevant. Each \
domain's DUTY.md, shown below, is a curated entry point, not a complete list: when it does not \
answer the question, look further with ls, glob and grep. Pass paths to `read` exactly as `ls` \
or `glob` returned them, never guessed or shortened."""

DUTY_CUT = "[DUTY.md cut here at 32 KiB: read {path} for the rest]"
NOTICE_HEADER = (
    "These files changed outside this conversation; the disk has the new version; "
    "if you read them before, read them again:"
)

# The file tools, exactly as an agent should give them to its model (docs/rendering.md).
# Served in the prefix's tools, after the bundle's own, when the version lists packs.
KNOWLEDGE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "ls",
        "description": (
            "List one folder of the knowledge files: one entry per line, folders end with '/'. "
            "Start with knowledge/. Long answers are cut at 100 KB; the last line then says "
            "which offset to pass to see more."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A folder, e.g. knowledge/ or knowledge/<pack>/<domain>/."},
                "offset": {"type": "integer", "minimum": 1, "description": "First entry to show (1-based)."},
            },
            "required": ["path"],
        },
    },
    {
        "name": "glob",
        "description": (
            "Find knowledge files by name. `*` matches within one folder name, `**` across folders, "
            "`?` one character, `{a,b}` either. Returns matching file paths, one per line, sorted."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A glob pattern, e.g. knowledge/**/*.md."},
                "offset": {"type": "integer", "minimum": 1, "description": "First match to show (1-based)."},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "grep",
        "description": (
            "Search the content of knowledge files with a regular expression (Python syntax; "
            "(?i) for case-insensitive). Returns path:line:text for each matching line. "
            "A search that takes too long stops and says so."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression."},
                "path": {
                    "type": "string",
                    "description": "A folder or file to search in (default knowledge/).",
                },
                "offset": {"type": "integer", "minimum": 1, "description": "First match to show (1-based)."},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "read",
        "description": (
            "Read a knowledge file, with line numbers. Pass the path exactly as ls, glob or grep "
            "returned it. Reads 2000 lines from `offset` unless `limit` says otherwise."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A file path as ls, glob or grep returned it."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines (default 2000)."},
            },
            "required": ["path"],
        },
    },
]


@dataclass(frozen=True)
class Prefix:
    system: str
    tools: list[dict[str, Any]]
    body: bytes  # canonical JSON of {"system", "tools"}
    sha256: str  # of `body`: usable as a provider's prompt_cache_key


@dataclass(frozen=True)
class Rendered:
    prefix: Prefix
    tail: str
    notices: list[dict[str, str]]
    version: int
    content_hash: str

    def body(self) -> bytes:
        """The response: canonical JSON, with the cached prefix bytes spliced in unchanged."""
        return b"".join(
            [
                b'{"content_hash":',
                canonical_bytes(self.content_hash),
                b',"notices":',
                canonical_bytes(self.notices),
                b',"prefix":',
                self.prefix.body,
                b',"prefix_sha256":',
                canonical_bytes(self.prefix.sha256),
                b',"tail":',
                canonical_bytes(self.tail),
                b',"version":',
                str(self.version).encode(),
                b"}",
            ]
        )


class _LRU:
    """The prefix cache: cachetools' LRU under a lock, bounded in entries and in bytes (a prefix
    embeds every DUTY.md of its packs, so one can be large). Entries are immutable and keyed by
    everything they are built from, so an entry is never stale. A prefix larger than the byte
    bound alone is still kept, alone (each entry counts at most `max_bytes`): the next render
    of that session must not rebuild it."""

    def __init__(self, size: int, max_bytes: int) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.items: LRUCache[Any, Prefix] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda prefix: min(len(prefix.body), max_bytes)
        )
        self.lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """The bytes held: the entries' sizes, or one prefix over the bound counted whole."""
        with self.lock:
            if len(self.items) == 1:  # reading the only entry cannot change the order
                (only,) = self.items.values()
                return len(only.body)
            return int(self.items.currsize)

    def get(self, key: Any) -> Prefix | None:
        with self.lock:
            return self.items.get(key)

    def put(self, key: Any, value: Prefix) -> None:
        with self.lock:
            self.items.pop(key, None)
            self.items[key] = value  # evicts the least recently used until the bytes fit
            while len(self.items) > self.size:
                self.items.popitem()

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


_prefixes = _LRU(PREFIX_CACHE_SIZE, PREFIX_CACHE_BYTES)


def prefix_cache_clear() -> None:
    """Empty this process's prefix cache: the next render builds its prefix (bench/render.py
    times that miss)."""
    _prefixes.clear()


# One statement, so the states and the texts come from one snapshot: the prefix cached under a
# pack's prefix_state is exactly the one built from the files that state describes.
_PACKS_SQL = """
SELECT p.name, p.prefix_state,
       ARRAY(SELECT DISTINCT f.domain FROM knowledge_packfile f WHERE f.pack_id = p.id AND f.domain <> ''),
       COALESCE((SELECT json_object_agg(f.domain, f.content) FROM knowledge_packfile f
                 WHERE f.pack_id = p.id AND f.path = f.domain || '/DUTY.md'), '{}')
FROM knowledge_pack p WHERE p.name = ANY(%s)
"""


@dataclass(frozen=True)
class _PackView:
    name: str
    state: str
    domains: list[str]
    duties: dict[str, str]


_STATES_SQL = "SELECT name, prefix_state FROM knowledge_pack WHERE name = ANY(%s)"


def _pack_states(names: list[str]) -> tuple[tuple[str, str], ...]:
    # Raw SQL: this runs on every render, and the ORM's compiler costs more than the query.
    if not names:
        return ()
    with connection.cursor() as cursor:
        cursor.execute(_STATES_SQL, [names])
        return tuple(sorted(cursor.fetchall()))


def _pack_views(names: list[str]) -> dict[str, _PackView]:
    if not names:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_PACKS_SQL, [names])
        rows = cursor.fetchall()
    return {name: _PackView(name, state, sorted(domains), duties or {}) for name, state, domains, duties in rows}


def cut_duty(text: str, path: str) -> str:
    """At most 32 KiB of UTF-8, cut at a character boundary, with a line saying where the rest is."""
    data = text.encode()
    if len(data) <= DUTY_LIMIT_BYTES:
        return text
    head = data[:DUTY_LIMIT_BYTES].decode(errors="ignore")  # drops a character split by the cut
    return f"{head}\n{DUTY_CUT.format(path=path)}"


def build_prefix(content: dict[str, Any], session_variables: dict[str, Any], packs: dict[str, _PackView]) -> Prefix:
    """The prefix from its inputs alone (the pure function the contract test guards)."""
    prompt = content["system_prompt"]
    if "variables" in content:  # content without declarations is never templated
        prompt = content_variables.fill(prompt, session_variables)
    parts = [prompt]
    tools = list(content.get("tools") or [])
    if "knowledge" in content:
        tools += KNOWLEDGE_TOOLS
        listed = [packs[name] for name in content["knowledge"] if name in packs]
        domains = [paths.model_path(p.name, d) + "/" for p in listed for d in p.domains]
        parts.append(GUIDANCE)
        parts.append("Domains:\n" + ("\n".join(f"- {d}" for d in domains) if domains else "(none yet)"))
        for pack in listed:
            for domain in pack.domains:
                if domain in pack.duties:
                    path = paths.model_path(pack.name, f"{domain}/{paths.DUTY}")
                    parts.append(f"## {path}\n\n{cut_duty(pack.duties[domain], path)}")
    system = "\n\n".join(parts)
    body = canonical_bytes({"system": system, "tools": tools})
    return Prefix(system=system, tools=tools, body=body, sha256=hashlib.sha256(body).hexdigest())


def prefix_for(
    *,
    content_hash: str,
    content: dict[str, Any],
    session_variables: dict[str, Any],
    names: list[str],
    states: tuple[tuple[str, str], ...] | None = None,
) -> Prefix:
    """The cached prefix for these inputs, built on a miss. `names`: the listed packs the
    caller reaches (packs_reachable), the only ones whose domains and DUTY.md it shows; the key
    holds their states, so callers that reach different packs never share an entry. `states`:
    those packs' (name, prefix_state), sorted, when the caller has read them already."""
    vars_key = canonical_bytes(session_variables)
    key = (content_hash, vars_key, _pack_states(names) if states is None else states)
    prefix = _prefixes.get(key)
    if prefix is None:
        views = _pack_views(names)
        prefix = build_prefix(content, session_variables, views)
        key = (content_hash, vars_key, tuple(sorted((v.name, v.state) for v in views.values())))
        _prefixes.put(key, prefix)
    return prefix


def build_tail(*, now: datetime, zone_name: str | None, turn: dict[str, Any], notices: list[dict[str, str]]) -> str:
    zone = ZoneInfo(zone_name) if zone_name else None
    local = now.astimezone(zone) if zone else now.astimezone(ZoneInfo("UTC"))
    lines = [f"Current date: {local:%Y-%m-%d}", f"Current time: {local:%H:%M} ({zone_name or 'UTC'})"]
    if turn:
        lines.append("Turn variables:")
        lines += [f"- {name}: {content_variables.as_text(value)}" for name, value in sorted(turn.items())]
    if notices:
        lines.append(NOTICE_HEADER)
        lines += [f"- {n['path']} ({n['change']})" for n in notices]
    return "\n".join(lines)


# A render's two reads in one round trip: the packs' states ('s' rows) and the changed reads ('n').
_TURN_SQL = """
SELECT 's', name, prefix_state, NULL::bigint, NULL::text, NULL::text
FROM knowledge_pack WHERE name = ANY(%s)
UNION ALL
SELECT 'n', p.name, r.path, r.id, r.known_sha256, COALESCE(f.sha256, '')
FROM knowledge_fileread r
JOIN knowledge_pack p ON p.id = r.pack_id
LEFT JOIN knowledge_packfile f ON f.pack_id = r.pack_id AND f.path = r.path
WHERE r.session_id = %s AND r.known_sha256 <> COALESCE(f.sha256, '')
"""


TurnReads = tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]


def turn_reads_query(session_id: Any, names: list[str]) -> tuple[str, list[Any]]:
    """turn_reads' statement, for a caller that sends it with others in one round trip."""
    return _TURN_SQL, [names, session_id]


def turn_reads(session: Session, names: list[str]) -> TurnReads:
    """The listed packs' (name, prefix_state), sorted, and the session's reads whose file changed
    (or went away) since it last knew it: (read id, pack, path, what it knew, hash now or '')."""
    with connection.cursor() as cursor:
        cursor.execute(_TURN_SQL, [names, session.pk])
        return turn_reads_of(cursor.fetchall())


def turn_reads_of(rows: list[tuple[Any, ...]]) -> TurnReads:
    """The rows of turn_reads_query as turn_reads answers them."""
    states = tuple(sorted((row[1], row[2]) for row in rows if row[0] == "s"))
    changed = [(row[3], row[1], row[2], row[4], row[5]) for row in rows if row[0] == "n"]
    return states, changed


def claim_notices(rows: list[tuple[Any, ...]]) -> list[dict[str, str]]:
    """Notices for the changed reads this call is first to tell; a file the session never read
    gives none (new files are found with ls and DUTY.md)."""
    notices = []
    for read_id, pack, path, known, current in rows:
        # Conditional on what we read, so two renders racing tell each change only once.
        if FileRead.objects.filter(pk=read_id, known_sha256=known).update(known_sha256=current):
            notices.append({"path": paths.model_path(pack, path), "change": "modified" if current else "deleted"})
    return sorted(notices, key=lambda n: n["path"])


def zone_name(session_variables: dict[str, Any]) -> str | None:
    zone = session_variables.get(content_variables.TIMEZONE_VARIABLE)
    return zone if isinstance(zone, str) and content_variables.timezone_problem(zone) is None else None


def session_render(
    *, session_id: Any, actor: Actor, variables: Any = None, now: datetime | None = None, loaded: Loaded = UNREAD
) -> Rendered:
    """Render one turn of a session (renews its lease like a fetch; 410 when ended or revoked).
    `loaded`: the session as the caller read it already (sessions_app.turns)."""
    session = session_for_turn(session_id=session_id, actor=actor, loaded=loaded)
    return render_session(session=session, actor=actor, variables=variables, now=now)


def render_session(
    *,
    session: Session,
    actor: Actor,
    variables: Any = None,
    now: datetime | None = None,
    reads: TurnReads | None = None,
) -> Rendered:
    """The render of a session already read, checked and touched (sessions_app.services.session_use,
    or the fast lane's own read) for `actor`: what a per-turn endpoint needs beyond the session
    itself. Only the listed packs `actor`'s key may see reach the prefix and the notices.
    `reads`: turn_reads' answer for those packs, when the caller read it with its own reads."""
    version = session.version
    content = content_document(version_id=version.pk, content_hash=version.content_hash)
    try:
        turn = content_variables.resolve(content.get("variables"), variables, scope="turn")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None
    names = packs_reachable(list(content.get("knowledge") or []), actor)
    states: tuple[tuple[str, str], ...] | None = None
    notices: list[dict[str, str]] = []
    if names:
        states, changed = reads if reads is not None else turn_reads(session, names)
        notices = claim_notices([row for row in changed if row[1] in names])
    prefix = prefix_for(
        content_hash=version.content_hash,
        content=content,
        session_variables=session.variables,
        names=names,
        states=states,
    )
    tail = build_tail(now=now or timezone.now(), zone_name=zone_name(session.variables), turn=turn, notices=notices)
    return Rendered(
        prefix=prefix, tail=tail, notices=notices, version=version.number, content_hash=version.content_hash
    )


def version_prefix(*, version_id: int, content_hash: str, session_variables: Any) -> tuple[Prefix, dict[str, Any]]:
    """The prefix a new session on this version would get with these session values (the
    admin's preview); returns it with the values after defaults. 400 for invalid values."""
    content = content_document(version_id=version_id, content_hash=content_hash)
    return content_prefix(content=content, content_hash=content_hash, session_variables=session_variables)


def content_prefix(
    *, content: dict[str, Any], content_hash: str, session_variables: Any
) -> tuple[Prefix, dict[str, Any]]:
    """version_prefix for content in hand (a version's, or a draft's not published)."""
    try:
        values = content_variables.resolve(content.get("variables"), session_variables, scope="session")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None
    # The admin's preview: people in the admin are not scoped, so every listed pack.
    names = packs_reachable(list(content.get("knowledge") or []), None)
    return prefix_for(content_hash=content_hash, content=content, session_variables=values, names=names), values
