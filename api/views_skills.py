"""Thin REST views for skills routing, turns, session skills, metrics and compaction (issue 12)."""

import json

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.serializers_skills import (
    CompactIn,
    CompactOut,
    MetricsOut,
    RouteIn,
    RouteOut,
    SessionSkillIn,
    SessionSkillList,
    SessionSkillOut,
    TurnIn,
    TurnOut,
)
from api.views import BaseApi
from core.compaction import CompactionError, compact, policy_from_content
from core.errors import InvalidContent
from registry import selectors as registry_selectors
from sessions_app import services as session_services
from skills import selectors as skill_selectors
from skills import services as skill_services


class SessionCompactApi(BaseApi):
    """Tier-1 micro-compaction of old tool results under the pinned version's policy."""

    @extend_schema(request=CompactIn, responses={200: CompactOut})
    def post(self, request: Request, session_id) -> Response:
        body = request.data
        if not isinstance(body, dict) or "messages" not in body:
            raise InvalidContent('Send {"messages": [...]}.', {"messages": ["This field is required."]})
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        policy = policy_from_content(skill_selectors.session_content(session))
        try:
            result = compact(body["messages"], policy)
        except CompactionError as exc:
            raise InvalidContent("The messages are not in a chat shape this reads.", {exc.path: [exc.message]})
        try:  # the answer echoes the messages: text UTF-8 cannot encode (a lone surrogate) is refused
            json.dumps(body["messages"], ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise InvalidContent("The messages hold text that is not valid Unicode.", {"messages": ["Lone surrogate."]})
        return Response(result.as_dict())


def _body(request: Request) -> dict:
    if not isinstance(request.data, dict):
        raise InvalidContent("Send a JSON object.", {"body": ["Expected a JSON object."]})
    return request.data


class SessionRouteApi(BaseApi):
    """Open the session's next turn and route its skills."""

    @extend_schema(request=RouteIn, responses={200: RouteOut})
    def post(self, request: Request, session_id) -> Response:
        body = _body(request)
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        return Response(skill_services.skill_route(session=session, messages=body.get("messages"), k=body.get("k")))


class SessionTurnsApi(BaseApi):
    """Report what the model invoked in a turn."""

    @extend_schema(request=TurnIn, responses={200: TurnOut})
    def post(self, request: Request, session_id) -> Response:
        body = _body(request)
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        turn = skill_services.skill_turn_report(
            session=session, turn=body.get("turn"), invoked=body.get("invoked"), expected=body.get("expected")
        )
        return Response(
            {
                "turn": turn.number,
                "invoked": turn.invoked,
                "expected": turn.expected,
                "loaded": [*turn.resident, *turn.routed, *turn.session_skills],
            }
        )


def _card(card) -> dict:
    return {
        "name": card.name,
        "summary": card.summary,
        "description": card.description,
        "source": card.source,
        "registered_turn": card.registered_turn,
        "last_invoked_turn": card.last_invoked_turn,
    }


class SessionSkillListApi(BaseApi):
    """The session's own (L3) skills: visible to this session only."""

    @extend_schema(
        summary="List the session's own skills",
        responses={200: SessionSkillList},
    )
    def get(self, request: Request, session_id) -> Response:
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        return Response({"results": [_card(c) for c in skill_selectors.session_skills_list(session=session)]})

    @extend_schema(
        summary="Register a session skill",
        request=SessionSkillIn,
        responses={201: SessionSkillOut, 200: SessionSkillOut},
    )
    def post(self, request: Request, session_id) -> Response:
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        card, created = skill_services.session_skill_register(session=session, data=request.data)
        return Response(_card(card), status=201 if created else 200)


class SessionSkillDetailApi(BaseApi):
    @extend_schema(
        summary="Remove a session skill",
        description="Removes one of the session's own (L3) skills; other sessions never saw it.",
        responses={204: None},
    )
    def delete(self, request: Request, session_id, name: str) -> Response:
        session = session_services.session_use(session_id=session_id, actor=actor_of(request))
        skill_services.session_skill_remove(session=session, name=name)
        return Response(status=204)


class VersionMetricsApi(BaseApi):
    """Routing metrics of one version: load hit rate, invalid-load rate, latency, counts."""

    @extend_schema(responses={200: MetricsOut})
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        metrics = skill_selectors.version_skill_metrics(version_id=version.pk)
        return Response({"bundle": bundle.name, "version": version.number, **metrics})
