"""The fast lane: the per-turn session calls without Django's request cycle.

`GET /api/v1/sessions/{id}/bundle/`, `POST /api/v1/sessions/{id}/heartbeat/` and
`POST /api/v1/sessions/{id}/render/` are what an agent calls on every turn, and
`POST /api/v1/sessions/` and `POST /api/v1/sessions/{id}/end/` what it calls once per session.
Through Django they pay ten middlewares (sessions, CSRF, messages, history: none of which an
API key call uses), URL resolution and DRF's request wrapping, which cost several times the
work itself.

Fetches, heartbeats, ends and starts are batched (serve_calls, below): each web process gathers
the ones that arrive while its previous batch runs and answers them together on one pool
thread, with one SQL read, one pipelined Redis round trip and one statement per kind of write.
Only plain calls are answered there; any other, and every render, goes to the one-by-one path
(serve, _start), also on the web thread pool (config.django_lane.pool):

1. one SQL statement reads the key (by prefix, under access.services.KEY_WHERE) joined with the
   session, its version and its bundle;
2. access.services.api_key_match checks the hash and notes last_used_at, as for every request;
3. access.ratelimit.api_throttle_wait counts the request (one pipelined Redis round trip);
4. sessions_app.selectors.session_checked applies visibility and revocation, and
   sessions_app.services.session_touch the lease;
5. the bytes come from registry.bundle_cache (a per-process LRU by content hash, then Redis,
   then the database) and are spliced into the envelope by pinned_body.

Every rule is the function the DRF views call (the bundle view calls the same `bundle_answer`
too), and nothing about a key, session or version is cached: each call is answered from a
read of PostgreSQL that started after the call arrived. Errors are rendered by
api.errors.exception_handler, so their bodies are the contract's to the byte. Anything unusual
is declined (config.dispatch.Decline) before any work is counted and goes to Django, which
answers it exactly as before: a missing or malformed Authorization header, an unknown key (401
is Django's; the decline says the key is not working, config.dispatch.KEY_NOT_WORKING, so that
Django does not look it up again), HEAD/OPTIONS, a host outside ALLOWED_HOSTS, a plain-HTTP
request that SECURE_SSL_REDIRECT would redirect, a database connection error (Django's path reconnects and
reports it). Headers are the ones Django's middleware would add (tests/test_fastlane.py
compares both paths, one by one and batched)."""

import asyncio
import io
import logging
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.core.signals import setting_changed
from django.db import DatabaseError, connection
from django.dispatch import receiver
from django.http.request import split_domain_port, validate_host
from django.utils import timezone
from rest_framework.exceptions import APIException, ParseError, Throttled
from rest_framework.renderers import JSONRenderer

from access.actors import Actor
from access.ratelimit import api_throttle_wait, api_throttle_waits
from access.services import (
    KEY_COLUMNS,
    KEY_WHERE,
    KEY_WORKING,
    api_key_lookup,
    api_key_match,
    key_actor,
    key_row,
    key_use_due,
)
from api.errors import error_response, exception_handler, is_unavailable
from api.parsers import SafeJSONParser
from api.serializers import RenderIn, session_in, session_out
from audit.context import _REQUEST_ID_RE, RequestContext, client_ip, current
from config.dispatch import (
    KEY_NOT_WORKING,
    Decline,
    Receive,
    Scope,
    Send,
    replay,
)
from config.django_lane import pool, read_body, request_is_secure
from core.errors import DomainError
from core.limits import is_bundle_name
from knowledge.render import render_session
from metrics import usage
from metrics.instruments import request_answered
from registry import bundle_cache
from registry import selectors as registry_selectors
from registry.models import Bundle
from sessions_app.models import Session
from sessions_app.selectors import (
    PINNED_COLUMNS,
    end_is_plain,
    lease_due,
    pinned_body,
    pinned_row,
    session_checked,
    session_get,
    session_passes,
    session_visible,
)
from sessions_app.services import (
    lease_lost,
    session_end,
    session_start,
    session_touch,
    sessions_end_owned,
    sessions_renew,
    sessions_start_on_label,
    start_is_plain,
)

logger = logging.getLogger(__name__)

_START_PATH = "/api/v1/sessions/"
_PATH = re.compile(
    r"^/api/v1/sessions/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/(bundle|heartbeat|end|render)/$"
)
_ROUTES = {
    "bundle": ("GET", "api/v1/sessions/<uuid:session_id>/bundle/", b"GET, HEAD, OPTIONS"),
    "heartbeat": ("POST", "api/v1/sessions/<uuid:session_id>/heartbeat/", b"POST, OPTIONS"),
    "end": ("POST", "api/v1/sessions/<uuid:session_id>/end/", b"POST, OPTIONS"),
    "render": ("POST", "api/v1/sessions/<uuid:session_id>/render/", b"POST, OPTIONS"),
    "start": ("POST", "api/v1/sessions/", b"POST, OPTIONS"),
}

_N_KEY = KEY_COLUMNS.count(",") + 1
# The key (by prefix) joined with the session, its version and its bundle. LEFT JOINs: a
# working key with no such session still comes back (a 404, counted against the key's budget).
_FETCH_SQL = (
    f"SELECT {KEY_COLUMNS}, {PINNED_COLUMNS}"
    + " FROM access_apikey k"
    + " LEFT JOIN sessions_app_session s ON s.id = %s"
    + " LEFT JOIN registry_bundleversion v ON v.id = s.version_id"
    + " LEFT JOIN registry_bundle b ON b.id = s.bundle_id"
    + f" WHERE {KEY_WHERE}"
)

# Session start: the key (as above) and the id of the bundle the body names, in one statement.
_START_SQL = (
    f"SELECT {KEY_COLUMNS}, b.id FROM access_apikey k LEFT JOIN registry_bundle b ON b.name = %s WHERE {KEY_WHERE}"
)


class _KeyNotWorking(Decline):
    """Declined because the Bearer key is not a working key: Django answers (401, or 429 past the
    failed-auth budget) without looking the key up again (config.dispatch.KEY_NOT_WORKING)."""

    def __init__(self, digest: str) -> None:
        super().__init__()
        self.digest = digest


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _etag_matches(header: str | None, content_hash: str) -> bool:
    """If-None-Match against the content hash (weak tags compare equal, `*` matches)."""
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or f'"{content_hash}"' in tags


def bundle_answer(session: Session, if_none_match: str | None) -> Answer:
    """The pinned-bundle answer for a checked session: 304 when the client holds these bytes."""
    version = session.version
    return pinned_answer(
        bundle_name=session.bundle.name,
        version_id=version.pk,
        content_hash=version.content_hash,
        number=version.number,
        content=_content_unless_held(version.pk, version.content_hash, if_none_match),
    )


def _content_unless_held(version_id: int, content_hash: str, if_none_match: str | None) -> bytes | None:
    """The version's bytes, or None when If-None-Match says the client holds them."""
    if _etag_matches(if_none_match, content_hash):
        return None
    return bundle_cache.content_bytes(version_id=version_id, content_hash=content_hash)


def pinned_answer(
    *, bundle_name: str, version_id: int, content_hash: str, number: int, content: bytes | None
) -> Answer:
    """200 with the envelope around `content`, or 304 when it is None (the client holds it).
    Counted as a fetch here: only once the bytes are in hand."""
    etag = [(b"etag", f'"{content_hash}"'.encode())]
    usage.fetch_recorded(version_id)
    if content is None:
        # Django's HttpResponse(status=304) carries its default content type; so does this.
        return Answer(304, [(b"content-type", b"text/html; charset=utf-8"), *etag], b"")
    body = pinned_body(bundle_name=bundle_name, content_hash=content_hash, number=number, content=content)
    return Answer(200, [(b"content-type", b"application/json"), *etag], body)


def session_started(*, actor: Actor, data: dict[str, Any], bundle: Bundle | None = None) -> tuple[Session, bool]:
    """Start a session from a validated SessionIn: the bundle (404 outside the key's scope;
    `bundle` when the caller read it already), the version when one is named, then
    sessions_app.services.session_start. The DRF view and the fast lane both call this."""
    if bundle is None or bundle.name != data["bundle"] or not actor.may_see_bundle(bundle.name):
        bundle = registry_selectors.bundle_for_start(name=data["bundle"], actor=actor)
    version = None
    if data.get("version") is not None:
        version = registry_selectors.version_get(bundle=bundle, number=data["version"])
    return session_start(
        bundle=bundle,
        actor=actor,
        label=data.get("label"),
        version=version,
        external_id=data.get("external_id"),
        ttl_seconds=data.get("ttl_seconds"),
        variables=data.get("variables"),
        routing_key=data.get("routing_key"),
    )


def _start(*, body: bytes, headers: dict[bytes, bytes], counted: bool = False) -> Answer:
    """POST /api/v1/sessions/ (runs on a pool thread), as SessionListApi answers it. `counted`:
    a batch counted it already (Call.counted)."""
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    authorization = headers.get(b"authorization", b"").split()
    if content_type != b"application/json" or not body or len(authorization) != 2:
        raise Decline  # 415, an empty body, a missing key: Django's answers
    if authorization[0].lower() != b"bearer":
        raise Decline
    try:
        secret = authorization[1].decode("ascii")
    except UnicodeDecodeError:
        raise Decline from None
    lookup = api_key_lookup(secret)
    if lookup is None:
        raise Decline
    try:  # parsed first for the bundle's name; a malformed body is answered once counted
        data, malformed = SafeJSONParser().parse(io.BytesIO(body), "application/json", {}), None
    except ParseError as exc:
        data, malformed = None, exc
    name = data.get("bundle") if isinstance(data, dict) else None
    try:
        with connection.cursor() as cursor:
            # Read before the body is validated: a name that cannot be a bundle's (one with a NUL
            # or a lone surrogate would fail in PostgreSQL) reads none.
            cursor.execute(_START_SQL, [name if is_bundle_name(name) else None, lookup[0]])
            rows = cursor.fetchall()
        actor = api_key_match(rows, lookup[1])
        if actor is None:
            raise _KeyNotWorking(lookup[1])
        wait = None if counted else api_throttle_wait(actor=actor, method="POST")
        if wait is not None:
            return _error(Throttled(wait))
        if malformed is not None:
            raise malformed
        data = session_in(data)
        bundle_id = next(row[_N_KEY] for row in rows if row[0] == actor.api_key_id)
        bundle = Bundle(id=bundle_id, name=name) if bundle_id is not None and isinstance(name, str) else None
        session, created = session_started(actor=actor, data=data, bundle=bundle)
    except (DomainError, APIException) as exc:
        return _error(exc)
    except DatabaseError as exc:
        return _outage(exc)
    finally:
        _release_connection()
    return session_answer(session, status=201 if created else 200)


def session_answer(session: Session, status: int = 200) -> Answer:
    """The session as SessionOut (start, heartbeat, end), rendered as DRF renders it."""
    return Answer(status, [(b"content-type", b"application/json")], JSONRenderer().render(session_out(session)))


def _session_of(row: tuple[Any, ...]) -> Session | None:
    pinned = pinned_row(row[_N_KEY:])
    return pinned.session if pinned else None


_checked = threading.local()
HEALTH_CHECK_EVERY = 1.0  # seconds


def _release_connection() -> None:
    """What request_finished does under Django (close a connection that failed or is too old,
    and check its health before the next statement, a SELECT 1 round trip), but the health
    check at most once a second per thread: on the per-turn path that round trip cost as much
    as the statement it guarded. A connection that failed in between is closed at once."""
    now = time.monotonic()
    if connection.errors_occurred or now - getattr(_checked, "at", 0.0) >= HEALTH_CHECK_EVERY:
        _checked.at = now
        connection.close_if_unusable_or_obsolete()


def _outage(exc: DatabaseError) -> Answer:
    """A database error after the call was counted: not declined (Django would count it again,
    and a write whose commit failed must not run twice). The connection is dropped and an outage
    answers 503 `unavailable`, as api.errors answers it everywhere; any other error is a bug."""
    connection.close()
    if not is_unavailable(exc):
        raise exc
    return _error(exc)


def _error(exc: Exception) -> Answer:
    response = exception_handler(exc, {})
    assert response is not None
    return Answer(
        response.status_code,
        [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in response.items()],
        response.content,
    )


def _render_variables(body: bytes) -> Any:
    """A render's turn variables, as SessionRenderApi reads them: no body (or an empty JSON
    value) is none; anything else must pass RenderIn (400 otherwise)."""
    data = SafeJSONParser().parse(io.BytesIO(body), "application/json", {}) if body else None
    if not data:
        return None
    serializer = RenderIn(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data.get("variables")


def _bearer_lookup(headers: dict[bytes, bytes]) -> tuple[str, str] | None:
    """access.services.api_key_lookup of the Bearer key, or None when there is none that could
    be a key (Django then answers: 401)."""
    authorization = headers.get(b"authorization", b"").split()
    if len(authorization) != 2 or authorization[0].lower() != b"bearer":
        return None
    try:
        return api_key_lookup(authorization[1].decode("ascii"))
    except UnicodeDecodeError:
        return None


def serve(
    *, kind: str, session_id: str, headers: dict[bytes, bytes], body: bytes = b"", counted: bool = False
) -> Answer:
    """The work of one call (runs on a pool thread). Raises Decline for what Django answers.
    `counted`: a batch counted it against the key's budget already (Call.counted)."""
    lookup = _bearer_lookup(headers)
    if lookup is None:
        raise Decline
    if body and headers.get(b"content-type", b"").split(b";")[0].strip().lower() != b"application/json":
        raise Decline  # a render's body in another type: Django's 415
    prefix, digest = lookup
    try:
        try:
            with connection.cursor() as cursor:
                cursor.execute(_FETCH_SQL, [session_id, prefix])
                rows = cursor.fetchall()
        except DatabaseError:
            # A broken connection (database restarted or away) before anything was counted:
            # drop it and let Django's path answer, which reconnects or reports the outage.
            connection.close()
            raise Decline from None
        actor = api_key_match(rows, digest)
        if actor is None:
            raise _KeyNotWorking(digest)
        row = next(row for row in rows if row[0] == actor.api_key_id)
        wait = None if counted else api_throttle_wait(actor=actor, method=_ROUTES[kind][0])
        if wait is not None:
            return _error(Throttled(wait))
        try:
            if kind == "end":
                session = session_visible(session=_session_of(row), session_id=session_id, actor=actor)
                return session_answer(session_end(session=session, actor=actor))
            variables = _render_variables(body) if kind == "render" else None
            session = session_touch(
                session=session_checked(session=_session_of(row), session_id=session_id, actor=actor),
                force=kind == "heartbeat",
            )
            if kind == "bundle":
                inm = headers.get(b"if-none-match")
                return bundle_answer(session, inm.decode("latin1") if inm is not None else None)
            if kind == "render":
                rendered = render_session(session=session, actor=actor, variables=variables)
                return Answer(200, [(b"content-type", b"application/json")], rendered.body())
            return session_answer(session)
        except (DomainError, APIException) as exc:
            return _error(exc)
    except DatabaseError as exc:
        return _outage(exc)
    finally:
        _release_connection()


# --- the batched calls ----------------------------------------------------------------------
# Each web process coalesces the fetches, heartbeats, ends and starts that arrive while its
# previous batch runs: one pool thread hop, one SQL read (every key joined with its session,
# version and bundle, as in _FETCH_SQL; for starts, with the bundle), one pipelined Redis round
# trip, and one statement (one commit) per kind of write. Nothing is cached: each call is
# answered from a read that started after it arrived. Only plain calls are answered here; every
# other one goes, uncounted, to the one-by-one path (serve, _start), which applies the full rules.

_BATCH_MAX = 256
_BATCH_SQL = (
    f"SELECT i.n, {KEY_COLUMNS},"
    + " s.api_key_id, s.status, s.expires_at, s.last_seen_at, s.ttl_seconds,"
    + " s.version_id, v.number, v.content_hash, v.state, b.name"
    + " FROM unnest(%s::text[], %s::uuid[]) WITH ORDINALITY AS i(prefix, sid, n)"
    + f" JOIN access_apikey k ON k.prefix = i.prefix AND {KEY_WORKING}"
    + " LEFT JOIN sessions_app_session s ON s.id = i.sid"
    + " LEFT JOIN registry_bundleversion v ON v.id = s.version_id"
    + " LEFT JOIN registry_bundle b ON b.id = s.bundle_id"
)


_START_BATCH_SQL = (
    f"SELECT i.n, {KEY_COLUMNS}, b.id"
    + " FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS i(prefix, name, n)"
    + f" JOIN access_apikey k ON k.prefix = i.prefix AND {KEY_WORKING}"
    + " LEFT JOIN registry_bundle b ON b.name = i.name"
)


@dataclass
class Call:
    kind: str  # "bundle", "heartbeat", "end" or "start"
    session_id: str
    prefix: str
    digest: str
    if_none_match: str | None
    body: bytes = b""
    key_not_working: bool = False  # the batch read found no working key with this secret
    # Set once a batch counted it against the key's budget: if the batch leaves it unanswered
    # (its group failed before committing), the one-by-one path answers it without counting again.
    counted: bool = False


def _rows(sql: str, columns: list[list[Any]]) -> dict[int, list[tuple[Any, ...]]]:
    """The rows of a batch read by call (index into `columns`' lists). Django's connection,
    through a server-side-binding cursor so that PostgreSQL keeps the plan (prepare=True;
    Django's own cursors bind on the client and plan every time). No health check first: a
    broken connection fails here and the batch goes one by one."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, columns, prepare=True)
        rows = cursor.fetchall()
    found: defaultdict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        found[row[0] - 1].append(row[1:])
    return found


def serve_calls(calls: list[Call]) -> list[Answer | None]:
    """Answer the plain calls of a batch (runs on a pool thread); None for each of the others,
    which nothing has counted yet."""
    answers: list[Answer | None] = [None] * len(calls)
    on_sessions = [n for n, call in enumerate(calls) if call.kind != "start"]
    starts = [n for n, call in enumerate(calls) if call.kind == "start"]
    try:
        plain = _plain_session_calls(calls, on_sessions) if on_sessions else []
        plain += _plain_starts(calls, starts) if starts else []
    except (DatabaseError, psycopg.Error):
        connection.close()  # the one-by-one path reconnects or answers the outage
        return answers
    plain.sort(key=lambda p: p[0])  # counted in arrival order

    waits = api_throttle_waits(requests=[(actor, _ROUTES[calls[n].kind][0]) for n, actor, _ in plain])
    for n, _, _ in plain:
        calls[n].counted = True
    renew: list[int] = []
    end: list[tuple[int, Actor]] = []
    start: dict[tuple[int, str, str | None], list[tuple[int, Actor, Any]]] = defaultdict(list)
    for (n, actor, info), wait in zip(plain, waits, strict=True):
        kind = calls[n].kind
        if wait is not None:
            answers[n] = _error(Throttled(wait))
        elif kind == "heartbeat":
            renew.append(n)
        elif kind == "end":
            end.append((n, actor))
        elif kind == "start":
            bundle_id, bundle_name, data = info
            start[(bundle_id, bundle_name, data.get("label"))].append((n, actor, data))
        else:
            name, version_id, content_hash, number, content = info
            answers[n] = pinned_answer(
                bundle_name=name, version_id=version_id, content_hash=content_hash, number=number, content=content
            )
    # Each group is its own statement and commit: one that fails unexpectedly leaves its calls
    # unanswered (to be served one by one, uncounted) and the others keep what they committed.
    if renew:
        _group(lambda: _renew(calls, renew, answers), "heartbeats")
    if end:
        _group(lambda: _end(calls, end, answers), "ends")
    for (bundle_id, bundle_name, label), group in start.items():
        _group(partial(_start_group, Bundle(id=bundle_id, name=bundle_name), label, group, answers), "starts")
    return answers


def _group(work: Callable[[], None], what: str) -> None:
    """Run one group of a batch. A failure that is not an outage (which the group answers
    itself with 503) is a bug or a statement failing for a reason of its own: logged, and the
    calls the group did not answer go one by one. A group's write is one transaction, so a
    group that failed committed nothing; once a start group committed, it answers every call
    (_start_group), so that no session is started twice."""
    try:
        work()
    except Exception:
        logger.exception("batched %s failed: serving them one by one", what)
        _release_connection()


def _plain_session_calls(calls: list[Call], indexes: list[int]) -> list[tuple[int, Actor, Any]]:
    """The plain fetches, heartbeats and ends among calls[indexes], with what answering needs."""
    found = _rows(_BATCH_SQL, [[calls[n].prefix for n in indexes], [calls[n].session_id for n in indexes]])
    now = timezone.now()
    plain: list[tuple[int, Actor, Any]] = []
    for i, n in enumerate(indexes):
        call = calls[n]
        key = key_row(found[i], call.digest)
        call.key_not_working = key is None
        if key is None or key_use_due(key, now) or key[_N_KEY + 1] is None:
            continue  # no such key, a last_used_at write due, or no such session
        owner, status, expires_at, last_seen_at, ttl, version_id, number, content_hash, state, name = key[_N_KEY:]
        actor = key_actor(key)
        if call.kind == "end":
            passes = end_is_plain(actor=actor, owner_key_id=owner, bundle_name=name, status=status)
        else:
            passes = session_passes(
                actor=actor,
                owner_key_id=owner,
                bundle_name=name,
                version_state=state,
                status=status,
                expires_at=expires_at,
                now=now,
            )
        if not passes or (call.kind == "bundle" and lease_due(last_seen_at=last_seen_at, ttl_seconds=ttl, now=now)):
            continue
        content = None
        if call.kind == "bundle":
            try:  # the bytes in hand before anything is counted
                content = _content_unless_held(version_id, content_hash, call.if_none_match)
            except DatabaseError:
                connection.close()
                continue
        plain.append((n, actor, (name, version_id, content_hash, number, content)))
    return plain


def _plain_starts(calls: list[Call], indexes: list[int]) -> list[tuple[int, Actor, Any]]:
    """The plain session starts among calls[indexes] (sessions_app.services.start_is_plain, a
    working key whose last_used_at needs no write, a bundle within its scope)."""
    bodies: dict[int, dict[str, Any]] = {}
    for n in indexes:
        try:
            data = session_in(SafeJSONParser().parse(io.BytesIO(calls[n].body), "application/json", {}))
        except APIException:
            continue
        if is_bundle_name(data.get("bundle")) and start_is_plain(data):
            bodies[n] = data
    wanted = list(bodies)
    if not wanted:
        return []
    found = _rows(_START_BATCH_SQL, [[calls[n].prefix for n in wanted], [bodies[n]["bundle"] for n in wanted]])
    now = timezone.now()
    plain: list[tuple[int, Actor, Any]] = []
    for i, n in enumerate(wanted):
        key = key_row(found[i], calls[n].digest)
        calls[n].key_not_working = key is None
        if key is None or key_use_due(key, now) or key[_N_KEY] is None:
            continue  # no such key, a last_used_at write due, or no such bundle
        actor = key_actor(key)
        if actor.may_see_bundle(bodies[n]["bundle"]):
            plain.append((n, actor, (key[_N_KEY], bodies[n]["bundle"], bodies[n])))
    return plain


def _start_group(bundle: Bundle, label: str | None, group: list[tuple[int, Actor, Any]], answers: list) -> None:
    """The starts of a batch on one bundle and label, counted already: one transaction."""
    try:
        sessions = sessions_start_on_label(
            bundle=bundle,
            label=label,
            starts=[(actor, data.get("ttl_seconds"), data.get("routing_key")) for _, actor, data in group],
        )
    except DomainError as exc:  # no such label, a required variable: every start's answer
        for n, _, _ in group:
            answers[n] = _error(exc)
        return
    except DatabaseError as exc:
        outage = _outage(exc)
        for n, _, _ in group:
            answers[n] = outage
        return
    for (n, _, _), session in zip(group, sessions, strict=True):
        try:
            answers[n] = session_answer(session, status=201)
        except Exception:  # a bug: the session exists, so this call must not be served again
            logger.exception("answering a batched start failed")
            answers[n] = _bug_answer()


def _bug_answer() -> Answer:
    """500 in the contract's shape, for a call whose write committed but could not be answered."""
    response = error_response(500, "internal_error", "The server failed to answer; the request was carried out.")
    return Answer(500, [(b"content-type", b"application/json")], response.content)


def _end(calls: list[Call], end: list[tuple[int, Actor]], answers: list[Answer | None]) -> None:
    """The ends of a batch, counted already: one statement; each answered as serve would."""
    try:
        ended = sessions_end_owned(session_ids=[calls[n].session_id for n, _ in end])
    except DatabaseError as exc:
        outage = _outage(exc)
        for n, _ in end:
            answers[n] = outage
        return
    for n, actor in end:
        session = ended.get(calls[n].session_id)
        if session is None:  # no longer active: session_end answers what the database holds
            try:
                session = session_end(session=session_get(session_id=calls[n].session_id, actor=actor), actor=actor)
            except DomainError as exc:
                answers[n] = _error(exc)
                continue
        answers[n] = session_answer(session)


def _renew(calls: list[Call], renew: list[int], answers: list[Answer | None]) -> None:
    """The heartbeats calls[renew], counted already: one UPDATE; each answered as serve would."""
    try:
        renewed = sessions_renew(session_ids=[calls[n].session_id for n in renew])
    except DatabaseError as exc:
        outage = _outage(exc)
        for n in renew:
            answers[n] = outage
        return
    for n in renew:
        session = renewed.get(calls[n].session_id)
        answers[n] = session_answer(session) if session is not None else _error(lease_lost(calls[n].session_id))


class _Batcher:
    """The batched calls of one event loop: those that arrive while a batch runs wait for the next."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: list[tuple[Call, asyncio.Future[Answer | None]]] = []
        self.running = False

    def submit(self, call: Call) -> "asyncio.Future[Answer | None]":
        future: asyncio.Future[Answer | None] = self.loop.create_future()
        self.waiting.append((call, future))
        if not self.running:
            self.running = True
            self.loop.call_soon(self._run)  # after the other callbacks of this turn of the loop
        return future

    def _run(self) -> None:
        batch, self.waiting = self.waiting[:_BATCH_MAX], self.waiting[_BATCH_MAX:]
        done = asyncio.wrap_future(pool().submit(serve_calls, [call for call, _ in batch]), loop=self.loop)
        done.add_done_callback(lambda done: self._finish(batch, done))

    def _finish(self, batch: list[tuple[Call, "asyncio.Future[Answer | None]"]], done: asyncio.Future) -> None:
        answers = None
        if done.cancelled() or done.exception() is not None:
            # A bug, not an outage (serve_calls answers those): each call goes one by one, and
            # one already counted (Call.counted) is not counted again. serve_calls runs each
            # group that writes under _group, so a failure cannot get here after a commit.
            logger.error("batched call failed", exc_info=None if done.cancelled() else done.exception())
        else:
            answers = done.result()
        for n, (_, future) in enumerate(batch):
            if not future.done():
                future.set_result(answers[n] if answers is not None else None)
        if self.waiting:
            self._run()
        else:
            self.running = False


# Two batchers per event loop: fetches (reads) and the calls that commit (heartbeats, ends,
# starts), so that a fetch never waits for another call's commit to reach the disk.
_batchers: dict[tuple[asyncio.AbstractEventLoop, bool], _Batcher] = {}


def _batcher(kind: str) -> _Batcher:
    loop = asyncio.get_running_loop()
    writes = kind != "bundle"
    batcher = _batchers.get((loop, writes))
    if batcher is None:
        for old in [old for old in _batchers if old[0].is_closed()]:
            del _batchers[old]
        batcher = _batchers[(loop, writes)] = _Batcher(loop)
    return batcher


def _call_of(kind: str, session_id: str, headers: dict[bytes, bytes], body: bytes) -> Call | None:
    """The batched call of a request, or None when its Authorization (or a start's content
    type or empty body) is unusual: the one-by-one path answers or declines those."""
    if kind == "render":
        return None  # one by one: its work is the render, not the read
    if kind == "start":
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if content_type != b"application/json" or not body:
            return None
    lookup = _bearer_lookup(headers)
    if lookup is None:
        return None
    inm = headers.get(b"if-none-match")
    return Call(kind, session_id, lookup[0], lookup[1], inm.decode("latin1") if inm is not None else None, body)


# What the settings decide per request (security headers, allowed hosts), computed once per
# distinct input and forgotten when a setting changes (tests override settings).
_memo: dict[tuple[str, Any], Any] = {}


@receiver(setting_changed)
def _forget(**kwargs: Any) -> None:
    _memo.clear()


def _security_headers(secure: bool) -> list[tuple[bytes, bytes]]:
    found = _memo.get(("security", secure))
    if found is None:
        found = _memo[("security", secure)] = _security_headers_now(secure)
    return found


def _security_headers_now(secure: bool) -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to an API answer."""
    out = [(b"x-frame-options", settings.X_FRAME_OPTIONS.encode())]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        out.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_HSTS_SECONDS and secure:
        value = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            value += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            value += "; preload"
        out.append((b"strict-transport-security", value.encode()))
    if settings.SECURE_REFERRER_POLICY:
        out.append((b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        out.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()))
    return out


def _host_allowed(headers: dict[bytes, bytes]) -> bool:
    host = headers.get(b"host", b"")
    found = _memo.get(("host", host))
    if found is None:
        found = _host_allowed_now(host.decode("latin1"))
        if len(_memo) < 1000:  # Host is the client's to choose: remember only a few
            _memo[("host", host)] = found
    return found


def _host_allowed_now(host: str) -> bool:
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


class _Meta:
    """Enough of a request for audit.context.client_ip."""

    def __init__(self, scope: Scope, headers: dict[bytes, bytes]) -> None:
        client = scope.get("client")
        self.META = {"REMOTE_ADDR": client[0] if client else ""}
        forwarded = headers.get(b"x-forwarded-for")
        if forwarded is not None:
            self.META["HTTP_X_FORWARDED_FOR"] = forwarded.decode("latin1")


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI: serve the fast lane's paths, decline everything else (config.dispatch)."""
    if scope["type"] != "http":
        raise Decline
    if scope["path"] == _START_PATH and scope["method"] == "POST":
        session_id, kind = "", "start"
    else:
        match = _PATH.match(scope["path"])
        if match is None or scope["method"] != _ROUTES[match.group(2)][0]:
            raise Decline
        session_id, kind = match.group(1), match.group(2)
    started = time.perf_counter()
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers[name] = headers[name] + b"," + value if name in headers else value
    secure = request_is_secure(scope, headers)
    if not _host_allowed(headers) or (settings.SECURE_SSL_REDIRECT and not secure):
        raise Decline
    # Read as the Django lane reads it (413, 408). A GET without Content-Length or
    # Transfer-Encoding has no body (RFC 9112 6.3; HTTP/2 may omit both for a POST that has
    # one): nothing to read for the common fetch.
    body = b""
    if scope["method"] != "GET" or b"content-length" in headers or b"transfer-encoding" in headers:
        read = await read_body(receive, send)
        if read is None:
            return
        body = read
    if body and kind not in ("start", "render"):
        raise Decline(replay(body))  # a body on a fetch, a heartbeat or an end is Django's to judge

    given = headers.get(b"x-request-id", b"").decode("latin1")
    request_id = given if _REQUEST_ID_RE.match(given) else uuid.uuid4().hex

    call = _call_of(kind, session_id, headers, body)

    def work() -> Answer:
        context = RequestContext(request_id=request_id, client_ip=client_ip(_Meta(scope, headers)))
        token = current.set(context)
        counted = call is not None and call.counted
        try:
            if kind == "start":
                return _start(body=body, headers=headers, counted=counted)
            return serve(kind=kind, session_id=session_id, headers=headers, body=body, counted=counted)
        finally:
            current.reset(token)

    answer = None
    if call is not None:
        answer = await _batcher(kind).submit(call)
        if answer is None and call.key_not_working:  # looked up once: Django answers, not again
            scope[KEY_NOT_WORKING] = call.digest
            raise Decline(replay(body))
    try:
        if answer is None:
            answer = await asyncio.get_running_loop().run_in_executor(pool(), work)
    except Decline as decline:
        if isinstance(decline, _KeyNotWorking):
            scope[KEY_NOT_WORKING] = decline.digest
        raise Decline(replay(body)) from None
    method, route, allow = _ROUTES[kind]
    response_headers = [
        *answer.headers,
        (b"content-length", str(len(answer.body)).encode()),
        (b"allow", allow),
        *_security_headers(secure),
        (b"x-request-id", request_id.encode()),
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": response_headers})
    await send({"type": "http.response.body", "body": answer.body})
    request_answered(route=route, method=method, status=answer.status, seconds=time.perf_counter() - started)
