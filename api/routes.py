"""The per-turn route table: every endpoint an agent calls per turn or per session, once.

Each TurnRoute names its path (a Django route under /api/v1/), its method, the function that
answers it (a domain call in sessions_app.turns, or the app that owns the work, then one
rendering in api.answers), its In and Out schemas, and whether the fast lane batches it.
Both HTTP lanes read this table:

  * Django: api/urls.py routes each path to the DRF view built here from the entry (`view`),
    which authenticates, throttles and parses as every other view does, then calls `answer`;
  * the fast lane (api/fastlane.py) matches the same path (the same Django route, compiled
    by Django), reads the key and the session in one statement, counts the call and calls the
    same `answer`, with the session it read as `loaded`. Its `Allow` header is the one
    Django computes for the view built here.

So both lanes answer a call with one function and one renderer: their bytes are equal by
construction (tests/edge/test_fastlane.py still compares them).

Adding a per-turn endpoint (docs/architecture.md): a domain function, its In/Out schema, one
TurnRoute in ROUTES below, and a test. An entry with `batched=False` is served one by one by
the fast lane with no further code there."""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.urls.resolvers import RoutePattern
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from access import ratelimit
from access.actors import Actor
from access.permissions import ROLE_REFUSED
from access.roles import ROLE_RANK, Role
from api.answers import JSON, Answer, bundle_answer, django_response, session_answer
from api.authentication import actor_of
from api.common import BaseApi
from api.views.evidence import EndIn, ScoreIn, ScoreOut, score_out
from api.views.sessions import RenderIn, RenderOut, SessionIn, SessionOut, session_in
from api.views.skills import TurnCallIn, TurnCallOut
from core import jsonbytes
from core.errors import Forbidden
from evidence import services as evidence_services
from knowledge.render import session_render
from registry.models import Bundle
from sessions_app import turns
from sessions_app.selectors import SESSION_ROLES
from turns.compose import session_turn
from turns.state import Prefetch, prefetch

PREFIX = "api/v1/"  # where config/urls.py includes api/urls.py


@dataclass(frozen=True)
class TurnCall:
    """One per-turn request, as either lane hands it to its entry."""

    actor: Actor
    session_id: Any = None  # the path's session id (str or UUID), for the routes on a session
    data: Any = None  # the parsed JSON body, for a route with a schema_in (None: no body)
    if_none_match: str | None = None
    loaded: turns.Loaded = turns.UNREAD  # the fast lane's read of the session (None: no such session)
    bundle: Bundle | None = None  # a start: the bundle the fast lane read with the key
    prefetched: Prefetch | None = None  # what the route's `prefetch` read with the key (the fast lane)
    # The fast lane took the route's slot (TurnRoute.slot) with the rate limit's count: `slot`
    # (None: all held), released by the lane once the answer is made.
    slot_taken: bool = False
    slot: ratelimit.Slot | None = None


@dataclass(frozen=True)
class TurnRoute:
    name: str  # the fast lane's name for it (and its batch group)
    path: str  # a Django route under PREFIX
    method: str  # "GET" or "POST"
    answer: Callable[[TurnCall], Answer]
    schema_in: type[serializers.Serializer] | None  # the body's schema (None: the body is not read)
    schema_out: Any  # what a 200/201 carries, for the OpenAPI document
    doc: str
    # Who may call it: required, so no route exists without a declaration. access_table()
    # below is generated from these; tests/access/test_access_lanes.py sends every role's key to
    # every route on both lanes of a live server and compares with it.
    roles: frozenset[str]
    openapi: dict[str, Any] = field(default_factory=dict)  # extend_schema's further arguments
    batched: bool = False  # the fast lane batches it (api.fastlane.serve_calls has its group)
    # The body is optional: a call without one is batched (when `batched`), one with a body is
    # served one by one (an end with an `outcome`).
    body_optional: bool = False
    # Reads the fast lane sends in the round trip of its key read, for a route on a session
    # (the turn: turns.state.prefetch), handed to the answer as TurnCall.prefetched once the
    # key is found working; the Django lane reads them in the answer.
    prefetch: Callable[[str], Prefetch] | None = None
    # The concurrency slot the answer runs in (the turn: ratelimit.turn_slot_spec), which the
    # fast lane takes in the round trip that counts the call against the key's budget.
    slot: Callable[[Actor], ratelimit.SlotSpec] | None = None

    @property
    def route(self) -> str:
        """The full Django route: the metrics label both lanes use."""
        return PREFIX + self.path

    @property
    def on_session(self) -> bool:
        return "<uuid:session_id>" in self.path

    def admits(self, actor: Actor) -> bool:
        return actor.role in self.roles

    def admit(self, actor: Actor) -> None:
        """403 (the contract's `permission_denied`, the same bytes as RolePermission's) for a
        key whose role this route does not declare. Both lanes call it before anything else
        about the call (its body, its session); the domain functions the answer calls refuse
        the same roles again (sessions_app.selectors.require_session_role), for every other
        entry point."""
        if not self.admits(actor):
            raise Forbidden(ROLE_REFUSED)

    @cached_property
    def view(self) -> type[APIView]:
        """The DRF view Django routes this path to: authentication, role, throttle and body
        parsing as for every view, then `answer`."""
        route = self

        def handle(view: APIView, request: Request, session_id: Any = None) -> HttpResponse:
            actor = actor_of(request)
            route.admit(actor)  # before the body is parsed, as the fast lane does
            call = TurnCall(
                actor=actor,
                session_id=session_id,
                data=request.data if route.schema_in is not None else None,
                if_none_match=request.headers.get("If-None-Match"),
            )
            return django_response(route.answer(call))

        schema = {"request": self.schema_in, "responses": self.schema_out, **self.openapi}
        method = self.method.lower()
        handle.__name__ = handle.__qualname__ = method
        name = "".join(part.capitalize() for part in ("session", self.name)) + "Api"
        # RolePermission lets through the lowest declared role and above; `admit` then refuses
        # any role between them that the route does not declare.
        lowest = min(self.roles, key=lambda role: ROLE_RANK[Role(role)])
        attributes = {
            method: extend_schema(**schema)(handle),
            "roles": {self.method: lowest},
            "__doc__": self.doc,
            "__module__": __name__,
        }
        return type(name, (BaseApi,), attributes)

    @cached_property
    def allow(self) -> bytes:
        """`Allow` as DRF computes it for `view` (e.g. GET, HEAD, OPTIONS)."""
        view = self.view()
        view.setup(HttpRequest())
        return ", ".join(view.allowed_methods).encode()

    @cached_property
    def pattern(self) -> RoutePattern:
        return RoutePattern(self.route, is_endpoint=True)


def render_variables(data: Any) -> Any:
    """A render's turn variables: no body (or an empty JSON value) is none; anything else
    must pass RenderIn (400 otherwise)."""
    if not data:
        return None
    serializer = RenderIn(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data.get("variables")


def _start(call: TurnCall) -> Answer:
    session, created = turns.session_started(actor=call.actor, data=session_in(call.data), bundle=call.bundle)
    # No re-read: session_start returns the session with its bundle and pinned version set.
    return session_answer(session, status=201 if created else 200)


def _fetch(call: TurnCall) -> Answer:
    session = turns.turn_fetch(session_id=call.session_id, actor=call.actor, loaded=call.loaded)
    return bundle_answer(session, call.if_none_match)


def _heartbeat(call: TurnCall) -> Answer:
    return session_answer(turns.turn_heartbeat(session_id=call.session_id, actor=call.actor, loaded=call.loaded))


def _end(call: TurnCall) -> Answer:
    serializer = EndIn(data=call.data or {})
    serializer.is_valid(raise_exception=True)
    outcome = serializer.validated_data.get("outcome")
    if outcome is None:
        return session_answer(turns.turn_end(session_id=call.session_id, actor=call.actor, loaded=call.loaded))
    checked = evidence_services.outcome_in(outcome)
    session = turns.session_seen(session_id=call.session_id, actor=call.actor, loaded=call.loaded)
    return session_answer(evidence_services.session_end_outcome(session=session, actor=call.actor, outcome=checked))


def _score(call: TurnCall) -> Answer:
    checked = evidence_services.score_in(call.data)
    session = turns.session_seen(session_id=call.session_id, actor=call.actor, loaded=call.loaded)
    score, created = evidence_services.score_record(session=session, actor=call.actor, score=checked)
    return Answer(201 if created else 200, [JSON], JSONRenderer().render(score_out(score)))


def _render(call: TurnCall) -> Answer:
    variables = render_variables(call.data)
    rendered = session_render(session_id=call.session_id, actor=call.actor, variables=variables, loaded=call.loaded)
    return Answer(200, [(b"content-type", b"application/json")], rendered.body())


def _turn(call: TurnCall) -> Answer:
    # One of the key's TURN_CONCURRENCY slots for the whole call, the checks of the body
    # included (they are work too); 429 in the contract's shape when all are held.
    if call.slot_taken:
        return _turn_in(call, call.slot)  # the fast lane took it and gives it back
    slot = ratelimit.turn_slot(actor=call.actor)
    try:
        return _turn_in(call, slot)
    finally:
        if slot is not None:
            slot.release()


def _turn_in(call: TurnCall, slot: ratelimit.Slot | None) -> Answer:
    if slot is None:
        raise Throttled(
            wait=1,
            detail=f"This key already has {settings.TURN_CONCURRENCY} turn calls running: wait for one to finish.",
        )
    answer = session_turn(
        session_id=call.session_id,
        actor=call.actor,
        body=call.data,
        loaded=call.loaded,
        prefetched=call.prefetched,
    )
    # orjson where its bytes are JSONRenderer's (core.jsonbytes), else JSONRenderer
    return Answer(200, [JSON], jsonbytes.dumps(answer) or JSONRenderer().render(answer))


ROUTES: list[TurnRoute] = [
    TurnRoute(
        name="start",
        path="sessions/",
        method="POST",
        answer=_start,
        schema_in=SessionIn,
        schema_out={201: SessionOut, 200: SessionOut},
        doc="POST: start a session pinned to a version.",
        roles=SESSION_ROLES,
        openapi={
            "summary": "Start a session",
            "description": (
                "Pins a new session to the version `label` (default `production`) targets at this instant, or to "
                "`version`: every fetch of the session then serves that version's exact bytes. 201 with the "
                "session; the same `external_id` from the same key answers 200 with the session it started "
                "before."
            ),
        },
        batched=True,
    ),
    TurnRoute(
        name="bundle",
        path="sessions/<uuid:session_id>/bundle/",
        method="GET",
        answer=_fetch,
        schema_in=None,
        schema_out={
            (200, "application/json"): OpenApiResponse(description="The canonical pinned bundle"),
            304: OpenApiResponse(description="Not modified"),
        },
        doc="GET the pinned bundle: the hot path, served from cached canonical bytes.",
        roles=SESSION_ROLES,
        openapi={
            "summary": "Fetch the pinned bundle",
            "description": (
                "The session's pinned bundle, the canonical JSON of bundle, version, content_hash and content: "
                "the same bytes on every call, whatever happened to labels since the session started. `ETag` is "
                "the content hash; a matching `If-None-Match` answers 304 with no body. Each call renews the "
                "lease. 410 `session_ended` once the session ended or expired; 410 `version_revoked` (with the "
                "labels' current targets) when its version was revoked."
            ),
        },
        batched=True,
    ),
    TurnRoute(
        name="heartbeat",
        path="sessions/<uuid:session_id>/heartbeat/",
        method="POST",
        answer=_heartbeat,
        schema_in=None,
        schema_out=SessionOut,
        doc="POST: renew the session's lease.",
        roles=SESSION_ROLES,
        openapi={
            "summary": "Renew a session's lease",
            "description": (
                "Extends the lease by the session's TTL. 410 `session_ended` once it ended or expired, 410 "
                "`version_revoked` when its version was revoked."
            ),
        },
        batched=True,
    ),
    TurnRoute(
        name="end",
        path="sessions/<uuid:session_id>/end/",
        method="POST",
        answer=_end,
        schema_in=EndIn,
        schema_out=SessionOut,
        doc="POST: end the session (optionally with its outcome).",
        roles=SESSION_ROLES,
        openapi={
            "summary": "End a session",
            "description": (
                "Ends the session; ending it again answers 200 as well. When it was the last session on a "
                "draining version, the worker marks that version drained. Optional body "
                '`{"outcome": {"status": "resolved" | "escalated" | "abandoned" | "failed", "reason"?}}`: '
                "how the session went (docs/api.md#evidence); the same outcome again answers 200, another "
                "one 409."
            ),
        },
        batched=True,
        body_optional=True,
    ),
    TurnRoute(
        name="render",
        path="sessions/<uuid:session_id>/render/",
        method="POST",
        answer=_render,
        schema_in=RenderIn,
        schema_out={200: RenderOut},
        doc="POST: the per-turn render (cache-stable prefix, volatile tail, change notices).",
        roles=SESSION_ROLES,
        openapi={"operation_id": "session_render"},
    ),
    TurnRoute(
        name="turn",
        path="sessions/<uuid:session_id>/turn/",
        method="POST",
        answer=_turn,
        schema_in=TurnCallIn,
        schema_out={200: TurnCallOut},
        doc="POST: one call per turn (report, route, render, compact, and the provider request).",
        roles=SESSION_ROLES,
        prefetch=prefetch,
        slot=ratelimit.turn_slot_spec,
        openapi={
            "operation_id": "session_turn",
            "summary": "One call per turn",
            "description": (
                "Reports `invoked` for the previous turn, routes this one, renders the prefix and tail and "
                "compacts the messages, on one read of the session; with `format`, the provider request with "
                "its cache breakpoints at the end of the stable prefix and of the conversation (docs/api.md, "
                "The turn call)."
            ),
        },
    ),
]

ROUTES.append(
    TurnRoute(
        name="scores",
        path="sessions/<uuid:session_id>/scores/",
        method="POST",
        answer=_score,
        schema_in=ScoreIn,
        schema_out={201: ScoreOut, 200: ScoreOut},
        doc="POST: a named score of the session (a user's thumbs, a judge's verdict, a human review).",
        roles=SESSION_ROLES,
        openapi={
            "operation_id": "session_score",
            "summary": "Score a session",
            "description": (
                "Records a named score `{name, value, source?, comment?, id?}` of the session, while it is "
                "active and up to EVIDENCE_SCORE_WINDOW_DAYS (default 7) after it ended (409 after). The same "
                "`id` again answers 200 with the score recorded first (docs/api.md#evidence)."
            ),
        },
    )
)

BY_NAME: dict[str, TurnRoute] = {route.name: route for route in ROUTES}


def access_table() -> dict[tuple[str, str], frozenset[str]]:
    """Who may call what, generated from ROUTES: {(method, Django route): roles}. The one
    table the access tests compare both lanes with (tests/access/test_access_lanes.py,
    tests/access/test_access_matrix.py); docs/api.md's Roles section states it in words."""
    return {(route.method, route.route): route.roles for route in ROUTES}


def urlpatterns() -> list[URLPattern]:
    """The Django lane's URLs for the per-turn paths (api/urls.py includes them)."""
    return [path(route.path, route.view.as_view()) for route in ROUTES]


def match(path_info: str, method: str) -> tuple[TurnRoute, str] | None:
    """(route, session id as sent) for a request the table serves, or None. The path is
    matched by the entry's Django route, compiled by Django, so both lanes take the same
    paths; the session id stays the string the uuid converter accepted."""
    for route in ROUTES:
        if route.method != method:
            continue
        found = route.pattern.regex.match(path_info.removeprefix("/"))
        if found is not None:
            return route, found.groupdict().get("session_id", "")
    return None
