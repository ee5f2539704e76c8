"""Reads of sessions, including the hot path: the pinned bundle."""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import Expression

from access.actors import Actor
from access.models import Role
from access.permissions import ROLE_REFUSED
from access.selectors import KEY_COLUMNS, KEY_WHERE, KEY_WORKING
from core import observe
from core.errors import Forbidden, NotFound, SessionEnded, VersionRevoked
from registry import bundle_cache
from registry.canonical import canonical_bytes
from registry.models import Bundle, BundleVersion, VersionState
from registry.selectors import label_targets, model_retired_error, retired_model
from sessions_app.models import Session, SessionStatus, active_sessions_annotation

# The hot path reads session, version and bundle in one statement, as raw SQL: Django's query
# compiler costs more than the query itself here (measured: about a third of a fetch). The
# per-turn reads below select the same PINNED_COLUMNS joined with the key (key_session_rows).
_SESSION_FIELDS = Session._meta.concrete_fields
_CONVERTED = [(i, f) for i, f in enumerate(_SESSION_FIELDS) if hasattr(f, "from_db_value")]
PINNED_COLUMNS = (
    ", ".join(f"s.{f.column}" for f in _SESSION_FIELDS)
    + ", v.number, v.content_hash, v.state, b.name, b.strict_conversation"
)
_PINNED_SQL = f"""
SELECT {PINNED_COLUMNS}
FROM sessions_app_session s
JOIN registry_bundleversion v ON v.id = s.version_id
JOIN registry_bundle b ON b.id = s.bundle_id
WHERE s.id = %s
"""


@dataclass(frozen=True)
class PinnedRow:
    """What the hot path reads: the session, and the few columns of its version and bundle a
    per-turn call needs (not whole rows: the version's canonical bytes come from the cache)."""

    session: Session
    version_number: int
    content_hash: str
    version_state: str
    bundle_name: str


def pinned_row(values: Sequence[Any]) -> PinnedRow | None:
    """Parse PINNED_COLUMNS as selected (None when the session's columns are NULL: a LEFT JOIN
    that found no session). The session comes back with `bundle` and `version` set to
    unsaved stand-ins holding those columns, so no further query runs for them."""
    columns = list(values[: len(_SESSION_FIELDS)])
    if columns[0] is None:
        return None
    for index, field in _CONVERTED:
        columns[index] = field.from_db_value(columns[index], None, connection)
    session = Session.from_db("default", [f.attname for f in _SESSION_FIELDS], columns)
    number, content_hash, state, bundle_name, strict = values[len(_SESSION_FIELDS) :]
    # The bundle's setting the turn call reads (registry.guard), on the same read.
    session.bundle = Bundle(id=session.bundle_id, name=bundle_name, strict_conversation=strict)
    session.version = BundleVersion(
        id=session.version_id, bundle_id=session.bundle_id, number=number, content_hash=content_hash, state=state
    )
    return PinnedRow(session, number, content_hash, state, bundle_name)


# The roles that may hold sessions: agent and every role above it. Not `ci`, whose key may only
# report and read checks (docs/api.md, Roles), in every lane and entry point: the per-turn route
# table (api/routes.py) declares the same set for each of its routes.
SESSION_ROLES: frozenset[str] = frozenset({Role.AGENT, Role.PUBLISHER, Role.OPS, Role.ADMIN})


def may_hold_sessions(actor: Actor) -> bool:
    return actor.role in SESSION_ROLES


def require_session_role(actor: Actor) -> None:
    """403 for a key whose role may not start, read or end sessions (a `ci` key). It comes
    before every other check, so such a key learns nothing of whether a session exists."""
    if not may_hold_sessions(actor):
        raise Forbidden(ROLE_REFUSED)


def _visible_to(owner_key_id: int | None, bundle_name: str, actor: Actor) -> bool:
    """The key that started a session sees it, and ops and above, within their key's bundle
    scope; to anyone else it does not exist (404), so session ids cannot be probed."""
    if not actor.may_see_bundle(bundle_name):
        return False
    owns = actor.owns(owner_key_id)
    return owns or actor.has_role(Role.OPS)


def lease_due(*, last_seen_at: datetime, ttl_seconds: int, now: datetime) -> bool:
    """Whether a fetch must renew the lease (sessions_app.services.session_touch): once it is a
    quarter-TTL old (SESSION_RENEW_FRACTION), or whenever this node's clock reads earlier than
    the renewal the database last wrote (its clock is behind: it cannot judge the lease's age,
    so the renewal, timed and checked by the database's now(), decides)."""
    age = now - last_seen_at
    return age < timedelta(0) or age >= timedelta(seconds=ttl_seconds * settings.SESSION_RENEW_FRACTION)


def touch_due(*, expires_at: datetime, last_seen_at: datetime, ttl_seconds: int, now: datetime) -> bool:
    """Whether a fetch's session_touch (sessions_app.services) writes: the lease ran out by this
    node's clock (the database then decides, in the renewal's WHERE or the expiry's), or a
    renewal is due (lease_due). The batched fetch (api.fastlane) answers only a session for
    which this is False; every other goes to the one-by-one path, which calls session_touch."""
    return expires_at <= now or lease_due(last_seen_at=last_seen_at, ttl_seconds=ttl_seconds, now=now)


# What session_refusal names: the first per-turn rule that refuses a session (403, 404, 410s).
Refusal = Literal["role", "hidden", "revoked", "ended", "retired"]


def session_refusal(
    *,
    actor: Actor,
    owner_key_id: int | None,
    bundle_name: str,
    status: str,
    version: BundleVersion,
) -> Refusal | None:
    """The first rule of a per-turn call that refuses this session to `actor`, in the order
    session_checked applies them, or None: "role" (403, a role that holds no session),
    "hidden" (404: neither its key nor ops, or outside the key's scope), "revoked" (410),
    "ended" (410, ended or expired), "retired" (410, its model retired). `version`: the pinned
    version, or a stand-in with its id, content_hash and state.

    The one statement of these rules, over the columns they read: session_checked raises what
    this names, and the fast lane's batched calls (api.fastlane) answer only a session for which
    it is None, from the columns of their one read for the batch, without building a Session
    per call (measured: bench/batched_calls.py), and leave every other to the one-by-one path."""
    if not may_hold_sessions(actor):
        return "role"
    if not _visible_to(owner_key_id, bundle_name, actor):
        return "hidden"
    if version.state == VersionState.REVOKED:
        return "revoked"
    if status != SessionStatus.ACTIVE:
        return "ended"
    if retired_model(version) is not None:
        return "retired"
    return None


def end_is_plain(*, actor: Actor, owner_key_id: int | None, bundle_name: str, status: str) -> bool:
    """True when session_end would end this session for `actor` as its owner, with no audit
    record: session_visible's rules pass (the role, then _visible_to), the key that started it
    ends it (session_end's `by_owner`) and the session is still active. The fast lane's batched
    ends (sessions_app.services.sessions_end_owned) take only these."""
    return (
        may_hold_sessions(actor)
        and _visible_to(owner_key_id, bundle_name, actor)
        and actor.owns(owner_key_id)
        and status == SessionStatus.ACTIVE
    )


def session_get(*, session_id: Any, actor: Actor) -> Session:
    session = (
        Session.objects.select_related("bundle", "version").defer("version__canonical").filter(pk=session_id).first()
    )
    return session_visible(session=session, session_id=session_id, actor=actor)


def session_visible(*, session: Session | None, session_id: Any, actor: Actor) -> Session:
    """`session` (loaded with its bundle), or 404 when there is none or `actor` may not see it
    (403 first for a role that may hold no session)."""
    require_session_role(actor)
    if session is None or not _visible_to(session.api_key_id, session.bundle.name, actor):
        raise NotFound(f"No session {session_id}.")
    session_noted(session)
    return session


def session_noted(session: Session) -> None:
    """Every call that acts on a session passes here (or session_start): its span and log lines
    carry the session and what it is pinned to (core.observe)."""
    version = session.version
    observe.session_used(
        session_id=session.pk, bundle=session.bundle.name, version=version.number, content_hash=version.content_hash
    )


def session_for_fetch(*, session_id: Any, actor: Actor) -> Session:
    """The read of the hot path and of heartbeats: one indexed read (session, version,
    bundle). Raises 404 for a session the actor may not see, 410 for an ended or expired
    session and for a revoked version. Every caller then renews the lease with
    sessions_app.services.session_touch, which also refuses (and records) a lease that ran out."""
    with connection.cursor() as cursor:
        cursor.execute(_PINNED_SQL, [session_id])
        values = cursor.fetchone()
    row = pinned_row(values) if values is not None else None
    return session_checked(session=row.session if row else None, session_id=session_id, actor=actor)


def session_checked(*, session: Session | None, session_id: Any, actor: Actor) -> Session:
    """The read-only rules of every per-turn call on a loaded session (with `bundle` and
    `version` set, or None when there is none): 404 unless `actor` may see it, 410 when its
    version was revoked, the session ended or its model retired (model_retired, with the
    labels' current targets). session_for_fetch and the fast lane
    (api.fastlane), which loads the session joined with the key, both call this, and then the
    service sessions_app.services.session_touch (the lease: 410 when it ran out, else renewed)."""
    session = session_visible(session=session, session_id=session_id, actor=actor)
    version = session.version
    refusal = session_refusal(
        actor=actor,
        owner_key_id=session.api_key_id,
        bundle_name=session.bundle.name,
        status=session.status,
        version=version,
    )
    if refusal == "revoked":
        raise VersionRevoked(
            f"Version {version.number} of {session.bundle.name!r} was revoked; start a new session.",
            {"labels": label_targets(session.bundle_id)},
        )
    if refusal == "ended":
        raise SessionEnded(f"Session {session.pk} is {session.status}; start a new session.")
    retired = retired_model(version) if refusal == "retired" else None
    if retired is not None:
        raise model_retired_error(
            info=retired,
            message=(
                f"Version {version.number} of {session.bundle.name!r} uses {retired.name}, which retired on "
                f"{retired.retires_at}; start a new session."
            ),
            status=410,
            labels=label_targets(session.bundle_id),
        )
    return session


def pinned_bundle_body(session: Session) -> bytes:
    """The canonical JSON of {"bundle", "content", "content_hash", "version"} of a session."""
    version = session.version
    return pinned_body(
        bundle_name=session.bundle.name,
        content_hash=version.content_hash,
        number=version.number,
        content=bundle_cache.content_bytes(version_id=version.pk, content_hash=version.content_hash),
    )


def pinned_body(*, bundle_name: str, content_hash: str, number: int, content: bytes) -> bytes:
    """The canonical JSON of {"bundle", "content", "content_hash", "version"}: the keys are
    already in sorted order and `content`, the version's stored canonical bytes (cached by
    content hash), is spliced in, never re-serialised."""
    return b"".join(
        [
            b'{"bundle":',
            canonical_bytes(bundle_name),
            b',"content":',
            content,
            b',"content_hash":"',
            content_hash.encode(),
            b'","version":',
            str(number).encode(),
            b"}",
        ]
    )


class SessionPins:
    """registry.pins' implementation (registered by sessions_app/apps.py)."""

    def active_on(self, version_id: int) -> int:
        return Session.objects.active_on(version_id)

    def any_active(self, version_id: int) -> bool:
        return Session.objects.active().pinned_to(version_id).exists()

    def active_annotation(self, label: str | None = None) -> Expression:
        return active_sessions_annotation(label)

    def active_ids(self, version_id: int, limit: int) -> list[str]:
        # (version, id) is the partial index of active sessions: a range scan that stops at `limit`.
        ids = Session.objects.active().pinned_to(version_id).order_by("pk").values_list("pk", flat=True)[:limit]
        return [str(pk) for pk in ids]


def active_sessions_by_version() -> list[tuple[str, int, int]]:
    """(bundle, version number, active sessions) for every version with one (the metrics
    scrape); the partial index on active sessions (session_active_version_id_idx) serves it."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT b.name, v.number, s.n
               FROM (SELECT version_id, count(*) AS n FROM sessions_app_session
                     WHERE status = 'active' GROUP BY version_id) s
               JOIN registry_bundleversion v ON v.id = s.version_id
               JOIN registry_bundle b ON b.id = v.bundle_id"""
        )
        return [(bundle, number, n) for bundle, number, n in cursor.fetchall()]


# --- the per-turn reads of the fast lane ----------------------------------------------------
# The caller's key (by prefix, under access.selectors.KEY_WORKING) joined with what the call
# is about, in one statement: a per-turn call pays one round trip for its key and its session.
# Raw SQL because the ORM cannot join the key to a session it has no relation with (the
# session is named by a parameter, and a LEFT JOIN keeps a working key with no such session:
# a 404 counted against the key's budget), and its compiler costs more than the query. Each
# row holds the key's KEY_N columns first (access.selectors.key_row picks the key by hash).

_KEY_SESSION_SQL = (
    f"SELECT {KEY_COLUMNS}, {PINNED_COLUMNS}"
    + " FROM access_apikey k"
    + " LEFT JOIN sessions_app_session s ON s.id = %s"
    + " LEFT JOIN registry_bundleversion v ON v.id = s.version_id"
    + " LEFT JOIN registry_bundle b ON b.id = s.bundle_id"
    + f" WHERE {KEY_WHERE}"
)
# A session start: the key and the id of the bundle the body names.
_KEY_BUNDLE_SQL = (
    f"SELECT {KEY_COLUMNS}, b.id FROM access_apikey k LEFT JOIN registry_bundle b ON b.name = %s WHERE {KEY_WHERE}"
)
# The same for a batch of calls (api.fastlane.serve_calls), with only the session columns the
# batch's rules read (session_refusal, end_is_plain, touch_due) and the answer needs.
_KEY_SESSIONS_SQL = (
    f"SELECT i.n, {KEY_COLUMNS},"
    + " s.api_key_id, s.status, s.expires_at, s.last_seen_at, s.ttl_seconds,"
    + " s.version_id, v.number, v.content_hash, v.state, b.name"
    + " FROM unnest(%s::text[], %s::uuid[]) WITH ORDINALITY AS i(prefix, sid, n)"
    + f" JOIN access_apikey k ON k.prefix = i.prefix AND {KEY_WORKING}"
    + " LEFT JOIN sessions_app_session s ON s.id = i.sid"
    + " LEFT JOIN registry_bundleversion v ON v.id = s.version_id"
    + " LEFT JOIN registry_bundle b ON b.id = s.bundle_id"
)
_KEY_BUNDLES_SQL = (
    f"SELECT i.n, {KEY_COLUMNS}, b.id"
    + " FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS i(prefix, name, n)"
    + f" JOIN access_apikey k ON k.prefix = i.prefix AND {KEY_WORKING}"
    + " LEFT JOIN registry_bundle b ON b.name = i.name"
)


def key_session_statement(*, prefix: str, session_id: str) -> tuple[str, list[Any]]:
    """The statement key_session_rows runs and its parameters (bench/scale.py explains it)."""
    return _KEY_SESSION_SQL, [session_id, prefix]


def key_session_rows(*, prefix: str, session_id: str) -> list[tuple[Any, ...]]:
    """The working keys with this prefix, each with the session's PINNED_COLUMNS after its
    own (NULLs when there is no such session: pinned_row then gives None)."""
    with connection.cursor() as cursor:
        cursor.execute(*key_session_statement(prefix=prefix, session_id=session_id))
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def key_bundle_rows(*, prefix: str, bundle_name: str | None) -> list[tuple[Any, ...]]:
    """The working keys with this prefix, each with the id of the bundle named (NULL when
    there is none). `bundle_name` must be one a bundle could have (core.limits.is_bundle_name)
    or None: a NUL or a lone surrogate would fail in PostgreSQL."""
    with connection.cursor() as cursor:
        cursor.execute(_KEY_BUNDLE_SQL, [bundle_name, prefix])
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def key_sessions_statement(*, prefixes: list[str], session_ids: list[str]) -> tuple[str, list[Any]]:
    """The statement key_sessions_rows runs and its parameters (bench/scale.py explains it)."""
    return _KEY_SESSIONS_SQL, [prefixes, session_ids]


def key_sessions_rows(*, prefixes: list[str], session_ids: list[str]) -> dict[int, list[tuple[Any, ...]]]:
    """key_session_rows for a batch, in one statement: by call (index into both lists), the
    key's columns then the session's api_key_id, status, expires_at, last_seen_at, ttl_seconds
    and version_id, the version's number, content_hash and state, and the bundle's name."""
    return _batch_rows(*key_sessions_statement(prefixes=prefixes, session_ids=session_ids))


def key_bundles_rows(*, prefixes: list[str], bundle_names: list[str]) -> dict[int, list[tuple[Any, ...]]]:
    """key_bundle_rows for a batch, in one statement, by call (index into both lists)."""
    return _batch_rows(_KEY_BUNDLES_SQL, [prefixes, bundle_names])


def _batch_rows(sql: str, columns: list[list[Any]]) -> dict[int, list[tuple[Any, ...]]]:
    """The rows of a batch read by call. Django's connection, through a server-side-binding
    cursor so that PostgreSQL keeps the plan (prepare=True; Django's own cursors bind on the
    client and plan every time). No health check first: a broken connection fails here (a
    DatabaseError or psycopg.Error) and the caller serves the batch one by one."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, columns, prepare=True)
        rows = cursor.fetchall()
    found: defaultdict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        found[row[0] - 1].append(row[1:])
    return found
