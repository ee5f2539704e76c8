"""The fast lane: the per-turn calls of the route table (api/routes.py) without Django's
request cycle.

The table's entries (start, fetch, heartbeat, end, render, turn) are what an agent calls on
every turn or once per session. Through Django they pay ten middlewares (sessions, CSRF,
messages, history: none of which an API key call uses), URL resolution and DRF's request
wrapping, which cost several times the work itself. Here a request is matched against the same
Django routes (api.routes.match), and answered by the same entry function the DRF view calls,
so the two lanes answer with one implementation; `Allow` is the one DRF computes for the view.

Fetches, heartbeats, ends and starts are batched (serve_calls, below): each web process gathers
the ones that arrive while its previous batch runs and answers them together on one pool
thread, with one SQL read, one pipelined Redis round trip and one statement per kind of write.
Only plain calls are answered there; any other, and every call of a route that is not batched,
goes to the one-by-one path (serve), also on the web thread pool (edge.django_lane.pool): one
SQL statement reads the key joined with the session, its version and its bundle
(sessions_app.selectors.key_session_rows, key_bundle_rows), in the round trip of the route's
prefetch (the turn's state, turns.state), used once the key is found working;
access.services.api_key_match checks the hash; access.ratelimit.api_throttle_wait_then_slot
counts the request and takes the route's slot (the turn's) in one Redis round trip; the
route's answer runs with the session read as `loaded`.

Nothing about a key, session or version is cached: each call is answered from a read of
PostgreSQL that started after the call arrived. Errors are rendered by
api.errors.exception_handler, so their bodies are the contract's to the byte. Anything unusual
is declined (edge.dispatch.Decline) before any work is counted and goes to Django, which
answers it exactly as before: a missing or malformed Authorization header, an unknown key (401
is Django's; the decline says the key is not working, edge.dispatch.KEY_NOT_WORKING, so that
Django does not look it up again), HEAD/OPTIONS, a host outside ALLOWED_HOSTS, a plain-HTTP
request that SECURE_SSL_REDIRECT would redirect, a database connection error on the read.
Headers are the ones Django's middleware would add (edge.http, audit.context), and
tests/edge/test_fastlane.py compares both paths, one by one and batched."""

import asyncio
import io
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from rest_framework.exceptions import APIException, ParseError, Throttled

from access.actors import Actor
from access.bearer import bearer_lookup
from access.ratelimit import api_throttle_wait_then_slot, api_throttle_waits
from access.selectors import KEY_N, key_actor, key_row, key_use_due
from access.services import api_key_match
from api import fastlane_trace
from api.answers import (
    Answer,
    bug_answer,
    content_unless_held,
    error_answer,
    pinned_answer,
    session_answer,
)
from api.errors import is_unavailable
from api.parsers import SafeJSONParser, parse_body
from api.routes import BY_NAME, TurnCall, TurnRoute, match
from api.views.sessions import session_in
from audit.context import RequestContext, current, request_id_of, scope_client_ip
from core import observe
from core.errors import DomainError
from core.limits import is_bundle_name
from core.pipelined import read_pipelined
from edge.dispatch import KEY_NOT_WORKING, Decline, Receive, Scope, Send, replay
from edge.django_lane import pool, read_body
from edge.http import edge_headers, headers_of, host_allowed, release_connection, request_is_secure
from metrics.access import request_logged
from metrics.instruments import request_answered
from registry.models import Bundle, BundleVersion
from sessions_app.selectors import (
    end_is_plain,
    key_bundle_rows,
    key_bundles_rows,
    key_session_rows,
    key_session_statement,
    key_sessions_rows,
    pinned_row,
    session_get,
    session_refusal,
    touch_due,
)
from sessions_app.services import (
    lease_lost,
    session_end,
    sessions_end_owned,
    sessions_renew,
    sessions_start_on_label,
    start_is_plain,
)
from turns.state import Prefetch

logger = logging.getLogger(__name__)


class _KeyNotWorking(Decline):
    """Declined because the Bearer key is not a working key: Django answers (401, or 429 past the
    failed-auth budget) without looking the key up again (edge.dispatch.KEY_NOT_WORKING)."""

    def __init__(self, digest: str) -> None:
        super().__init__()
        self.digest = digest


def _outage(exc: DatabaseError) -> Answer:
    """A database error after the call was counted: not declined (Django would count it again,
    and a failed commit must not run twice). The connection is dropped; an outage is 503."""
    connection.close()
    if not is_unavailable(exc):
        raise exc
    return error_answer(exc)


def _json_body(headers: dict[bytes, bytes], body: bytes) -> bool:
    return headers.get(b"content-type", b"").split(b";")[0].strip().lower() == b"application/json"


def _parsed(body: bytes) -> tuple[Any, APIException | None]:
    """The JSON body (None when there is none), or the ParseError to answer once counted."""
    if not body:
        return None, None
    try:
        return parse_body(body), None  # orjson where it reads what SafeJSONParser reads
    except ParseError as exc:
        return None, exc


def _read(route: TurnRoute, prefix: str, session_id: str, data: Any) -> tuple[list[Any], Prefetch | None]:
    """The key's rows joined with the session of a route on one, else (a start) the bundle the
    body names (a name no bundle could have reads none: a NUL would fail in PostgreSQL); and in
    the same round trip, what the route prefetches (the turn's state, turns.state)."""
    name = data.get("bundle") if isinstance(data, dict) else None
    try:
        if route.on_session and route.prefetch is not None:
            ahead = route.prefetch(session_id)
            found = read_pipelined([key_session_statement(prefix=prefix, session_id=session_id), *ahead.queries])
            return found[0], ahead.read(found[1:])
        if route.on_session:
            return key_session_rows(prefix=prefix, session_id=session_id), None
        return key_bundle_rows(prefix=prefix, bundle_name=name if is_bundle_name(name) else None), None
    except DatabaseError:
        # A broken connection (database restarted or away) before anything was counted:
        # drop it and let Django's path answer, which reconnects or reports the outage.
        connection.close()
        raise Decline from None


def _turn_call(
    route: TurnRoute, actor: Actor, row: Any, session_id: str, data: Any, headers: Any, prefetched: Prefetch | None
) -> TurnCall:
    """The entry's call, with what the read found: the session (None: no such session) and
    what the route prefetched, or the start's bundle."""
    inm = headers.get(b"if-none-match")
    call = TurnCall(actor=actor, data=data, if_none_match=inm.decode("latin1") if inm is not None else None)
    if route.on_session:
        pinned = pinned_row(row[KEY_N:])
        return replace(call, session_id=session_id, loaded=pinned.session if pinned else None, prefetched=prefetched)
    name = data.get("bundle") if isinstance(data, dict) else None
    bundle_id = row[KEY_N]
    return replace(
        call, bundle=Bundle(id=bundle_id, name=name) if bundle_id is not None and isinstance(name, str) else None
    )


def serve(
    *, route: TurnRoute, session_id: str, headers: dict[bytes, bytes], body: bytes = b"", counted: bool = False
) -> Answer:
    """The work of one call (runs on a pool thread): the key read with the session (or the
    start's bundle), the call counted, then the route's answer. Raises Decline for what Django
    answers. `counted`: a batch counted it against the key's budget already (Call.counted)."""
    lookup = bearer_lookup(headers.get(b"authorization", b""))
    if lookup is None:
        raise Decline  # no key, or not one that could be: Django's 401
    if body and not _json_body(headers, body):
        raise Decline  # a body in another type: Django's 415
    if not route.on_session and not body:
        raise Decline  # a start without a body: Django's 400
    prefix, digest = lookup
    data, malformed = _parsed(body)  # first: a start reads the bundle its body names
    try:
        rows, prefetched = _read(route, prefix, session_id, data)
        actor = api_key_match(rows, digest)
        if actor is None:
            raise _KeyNotWorking(digest)
        observe.key_used(prefix)
        # The route's slot taken in the round trip that counts the call (not for a 403 or 400)
        spec = route.slot(actor) if route.slot and not counted and route.admits(actor) and malformed is None else None
        counting = partial(api_throttle_wait_then_slot, actor=actor, method=route.method, spec=spec)
        wait, slot = (None, None) if counted else counting()
        if wait is not None:
            return error_answer(Throttled(wait))
        with slot if slot is not None else nullcontext():  # given back once answered
            route.admit(actor)  # the role first, as the Django lane's view does: 403 before the body
            if malformed is not None:
                raise malformed
            row = next(row for row in rows if row[0] == actor.api_key_id)
            call = _turn_call(route, actor, row, session_id, data, headers, prefetched)
            return route.answer(replace(call, slot_taken=True, slot=slot) if spec else call)
    except (DomainError, APIException) as exc:
        return error_answer(exc)
    except DatabaseError as exc:
        return _outage(exc)
    finally:
        release_connection()


# --- the batched calls ----------------------------------------------------------------------
# One pool thread hop, one SQL read (key_sessions_rows; key_bundles_rows for starts), one
# Redis round trip and one statement (one commit) per kind of write, for the calls that arrive
# while the previous batch runs. Nothing is cached; every call that is not plain goes,
# uncounted, to the one-by-one path (serve), which applies the full rules.

_BATCH_MAX = 256


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
    span: Any = None  # the request's span while tracing is on (api.fastlane_trace)


def serve_calls(calls: list[Call]) -> list[Answer | None]:
    """Answer the plain calls of a batch (runs on a pool thread); None for each of the others,
    which nothing has counted yet."""
    with fastlane_trace.batch(len(calls), [call.span for call in calls]):
        return _serve_calls(calls)


def _serve_calls(calls: list[Call]) -> list[Answer | None]:
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

    waits = api_throttle_waits(requests=[(actor, BY_NAME[calls[n].kind].method) for n, actor, _ in plain])
    for n, _, _ in plain:
        calls[n].counted = True
    renew: list[int] = []
    end: list[tuple[int, Actor]] = []
    start: dict[tuple[int, str, str | None], list[tuple[int, Actor, Any]]] = defaultdict(list)
    for (n, actor, info), wait in zip(plain, waits, strict=True):
        kind = calls[n].kind
        if wait is not None:
            answers[n] = error_answer(Throttled(wait))
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
        _group(partial(_start_group, calls, Bundle(id=bundle_id, name=bundle_name), label, group, answers), "starts")
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
        release_connection()


def _plain_session_calls(calls: list[Call], indexes: list[int]) -> list[tuple[int, Actor, Any]]:
    """The plain fetches, heartbeats and ends among calls[indexes], with what answering needs."""
    found = key_sessions_rows(
        prefixes=[calls[n].prefix for n in indexes], session_ids=[calls[n].session_id for n in indexes]
    )
    now = timezone.now()
    plain: list[tuple[int, Actor, Any]] = []
    for i, n in enumerate(indexes):
        call = calls[n]
        key = key_row(found[i], call.digest)
        call.key_not_working = key is None
        if key is None or key_use_due(key, now) or key[KEY_N + 1] is None:
            continue  # no such key, a last_used_at write due, or no such session
        owner, status, expires_at, last_seen_at, ttl, version_id, number, content_hash, state, name = key[KEY_N:]
        actor = key_actor(key)
        if not BY_NAME[call.kind].admits(actor):
            continue  # a role the route does not declare: serve refuses it (403)
        if call.kind == "end":  # session_visible's rules, and no audit record (the key that started it)
            passes = end_is_plain(actor=actor, owner_key_id=owner, bundle_name=name, status=status)
        else:  # session_checked's rules, then no lease write for a fetch, a lease running for a heartbeat
            refusal = session_refusal(
                actor=actor,
                owner_key_id=owner,
                bundle_name=name,
                status=status,
                version=BundleVersion(id=version_id, content_hash=content_hash, state=state),
            )
            due = touch_due(expires_at=expires_at, last_seen_at=last_seen_at, ttl_seconds=ttl, now=now)
            passes = refusal is None and (not due if call.kind == "bundle" else expires_at > now)
        if not passes:
            continue
        content = None
        if call.kind == "bundle":
            try:  # the bytes in hand before anything is counted
                content = content_unless_held(version_id, content_hash, call.if_none_match)
            except DatabaseError:
                connection.close()
                continue
        fastlane_trace.session(
            call.span, session_id=call.session_id, bundle=name, version=number, content_hash=content_hash
        )
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
    found = key_bundles_rows(
        prefixes=[calls[n].prefix for n in wanted], bundle_names=[bodies[n]["bundle"] for n in wanted]
    )
    now = timezone.now()
    plain: list[tuple[int, Actor, Any]] = []
    for i, n in enumerate(wanted):
        key = key_row(found[i], calls[n].digest)
        calls[n].key_not_working = key is None
        if key is None or key_use_due(key, now) or key[KEY_N] is None:
            continue  # no such key, a last_used_at write due, or no such bundle
        actor = key_actor(key)
        if BY_NAME["start"].admits(actor) and actor.may_see_bundle(bodies[n]["bundle"]):
            plain.append((n, actor, (key[KEY_N], bodies[n]["bundle"], bodies[n])))
    return plain


def _start_group(
    calls: list[Call], bundle: Bundle, label: str | None, group: list[tuple[int, Actor, Any]], answers: list
) -> None:
    """The starts of a batch on one bundle and label, counted already: one transaction."""
    try:
        sessions = sessions_start_on_label(
            bundle=bundle,
            label=label,
            starts=[(actor, data.get("ttl_seconds"), data.get("routing_key")) for _, actor, data in group],
        )
    except DomainError as exc:  # no such label, a required variable: every start's answer
        for n, _, _ in group:
            answers[n] = error_answer(exc)
        return
    except DatabaseError as exc:
        outage = _outage(exc)
        for n, _, _ in group:
            answers[n] = outage
        return
    for (n, _, _), session in zip(group, sessions, strict=True):
        if calls[n].span is not None:
            fastlane_trace.session(
                calls[n].span,
                session_id=session.pk,
                bundle=bundle.name,
                version=session.version.number,
                content_hash=session.version.content_hash,
            )
        try:
            answers[n] = session_answer(session, status=201)
        except Exception:  # a bug: the session exists, so this call must not be served again
            logger.exception("answering a batched start failed")
            answers[n] = bug_answer()


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
                answers[n] = error_answer(exc)
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
        answers[n] = session_answer(session) if session is not None else error_answer(lease_lost(calls[n].session_id))


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


def _batcher(route: TurnRoute) -> _Batcher:
    loop = asyncio.get_running_loop()
    writes = route.method != "GET"
    batcher = _batchers.get((loop, writes))
    if batcher is None:
        for old in [old for old in _batchers if old[0].is_closed()]:
            del _batchers[old]
        batcher = _batchers[(loop, writes)] = _Batcher(loop)
    return batcher


def _call_of(route: TurnRoute, session_id: str, headers: dict[bytes, bytes], body: bytes) -> Call | None:
    """The batched call of a request, or None when its route is not batched or its
    Authorization (or a start's content type or empty body) is unusual: the one-by-one path
    answers or declines those."""
    if not route.batched:
        return None  # one by one (a render: its work is the render, not the read)
    if route.body_optional:
        if body:
            return None  # an end with an outcome: one by one
    elif route.schema_in is not None and (not body or not _json_body(headers, body)):
        return None
    lookup = bearer_lookup(headers.get(b"authorization", b""))
    if lookup is None:
        return None
    inm = headers.get(b"if-none-match")
    return Call(route.name, session_id, lookup[0], lookup[1], inm.decode("latin1") if inm is not None else None, body)


async def _body(scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> bytes | None:
    """The body, read as the Django lane reads it (None: refused, 413 or 408 answered). A GET
    without Content-Length or Transfer-Encoding has no body (RFC 9112 6.3; HTTP/2 may omit
    both for a POST that has one): nothing to read for the common fetch."""
    if scope["method"] == "GET" and b"content-length" not in headers and b"transfer-encoding" not in headers:
        return b""
    return await read_body(receive, send)


async def _send(send: Send, answer: Answer, route: TurnRoute, secure: bool, request_id: str) -> None:
    """The answer with the headers Django's middleware would add around it."""
    length = (b"content-length", str(len(answer.body)).encode())
    headers = [*answer.headers, length, (b"allow", route.allow), *edge_headers(secure, request_id)]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI: serve the fast lane's paths, decline everything else (edge.dispatch)."""
    if scope["type"] != "http":
        raise Decline
    found = match(scope["path"], scope["method"])
    if found is None:
        raise Decline
    route, session_id = found
    started = time.perf_counter()
    headers = headers_of(scope)
    secure = request_is_secure(scope, headers)
    if not host_allowed(headers) or (settings.SECURE_SSL_REDIRECT and not secure):
        raise Decline
    body = await _body(scope, receive, send, headers)
    if body is None:
        return  # refused: 413 or 408 answered
    if body and route.schema_in is None:
        raise Decline(replay(body))  # a body on a fetch, a heartbeat or an end is Django's to judge

    given = headers.get(b"x-request-id", b"").decode("latin1")
    request_id = request_id_of(given)

    call = _call_of(route, session_id, headers, body)
    span = fastlane_trace.request_span(
        method=route.method, route=route.route, headers=headers, key_prefix=call.prefix if call else None
    )
    if call is not None:
        call.span = span

    def work() -> Answer:
        context = RequestContext(request_id=request_id, client_ip=scope_client_ip(scope))
        token, notes = current.set(context), observe.begin()
        counted = call is not None and call.counted
        try:
            with fastlane_trace.current(span):
                return serve(route=route, session_id=session_id, headers=headers, body=body, counted=counted)
        finally:
            observe.end(notes)
            current.reset(token)

    answer = None
    try:
        if call is not None:
            answer = await _batcher(route).submit(call)
            if answer is None and call.key_not_working:  # looked up once: Django answers, not again
                scope[KEY_NOT_WORKING] = call.digest
                raise Decline
        if answer is None:
            answer = await asyncio.get_running_loop().run_in_executor(pool(), work)
    except Decline as decline:
        if isinstance(decline, _KeyNotWorking):
            scope[KEY_NOT_WORKING] = decline.digest
        fastlane_trace.declined(span)
        raise Decline(replay(body)) from None
    await _send(send, answer, route, secure, request_id)
    fastlane_trace.answered(span, answer.status)
    seconds = time.perf_counter() - started
    request_answered(route=route.route, method=route.method, status=answer.status, seconds=seconds)
    lookup = bearer_lookup(headers.get(b"authorization", b""))  # the key's public prefix, as sent
    prefix = lookup[0] if lookup is not None else ""
    request_logged(route.route, route.method, answer.status, seconds, request_id, prefix, session_id)
