"""Skills routing, turn reports, session skills, routing metrics and compaction (docs/skills.md),
and the turn call's In and Out schemas: the serializers (they describe the bodies for the
OpenAPI document; the rules live in skills/services.py, core/compaction.py and turns/), then
the thin views."""

import json

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.common import BaseApi
from core.compaction import CompactionError, compact, policy_from_content
from core.errors import InvalidContent
from registry import selectors as registry_selectors
from sessions_app import services as session_services
from skills import selectors as skill_selectors
from skills import services as skill_services


class ChatMessage(serializers.Serializer):
    role = serializers.ChoiceField(choices=["user", "assistant", "system", "tool", "developer"])
    content = serializers.JSONField(help_text="Text, or a list of content parts/blocks.")


class RouteIn(serializers.Serializer):
    messages = ChatMessage(many=True, help_text="The conversation so far; the newest user message is routed.")
    k = serializers.IntegerField(min_value=1, max_value=20, default=5, required=False)


class RoutedSkill(serializers.Serializer):
    name = serializers.CharField()
    score = serializers.FloatField()
    category = serializers.CharField()
    why = serializers.CharField()


class RouteOut(serializers.Serializer):
    resident = serializers.ListField(child=serializers.CharField(), help_text="L1 skills, always loaded.")
    routed = RoutedSkill(many=True, help_text="L2 skills for this turn, best first, at most k.")
    session = serializers.ListField(child=serializers.CharField(), help_text="The session's live L3 skills.")
    categories = serializers.ListField(child=serializers.CharField())
    demoted = serializers.ListField(child=serializers.CharField(), help_text="Left out by the ghost-loop rule.")
    turn = serializers.IntegerField()
    routing = serializers.ChoiceField(
        choices=["full", "keywords"],
        help_text="`full`: the version's routing index; `keywords`: keywords alone while the index is built.",
    )


class TurnIn(serializers.Serializer):
    turn = serializers.IntegerField(min_value=1)
    invoked = serializers.ListField(child=serializers.CharField())
    expected = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        allow_null=True,
        help_text="Optional label: the skills this turn needed (review, evaluation); feeds decision_error_rate.",
    )


class TurnOut(TurnIn):
    loaded = serializers.ListField(child=serializers.CharField())


class SessionSkillIn(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$", max_length=64)
    summary = serializers.CharField(max_length=60)
    description = serializers.CharField(max_length=4000)
    # A field named like Field.source (the stubs type that attribute): a declaration, not an override.
    source = serializers.CharField(max_length=200, help_text="Where it came from: user, agent, tool ...")  # type: ignore[assignment]


class SessionSkillOut(SessionSkillIn):
    registered_turn = serializers.IntegerField()
    last_invoked_turn = serializers.IntegerField(allow_null=True)


class SessionSkillList(serializers.Serializer):
    results = SessionSkillOut(many=True)


class CompactIn(serializers.Serializer):
    messages = serializers.ListField(child=serializers.JSONField(), help_text="OpenAI or Anthropic chat shape.")


class CompactOut(CompactIn):
    elided = serializers.IntegerField()
    truncated = serializers.IntegerField()
    chars_before = serializers.IntegerField()
    chars_after = serializers.IntegerField()


class Latency(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


class MetricsOut(serializers.Serializer):
    bundle = serializers.CharField()
    version = serializers.IntegerField()
    turns = serializers.IntegerField()
    sessions = serializers.IntegerField()
    reported_turns = serializers.IntegerField()
    invocations = serializers.IntegerField()
    routed_loads = serializers.IntegerField()
    load_hit_rate = serializers.FloatField(allow_null=True, help_text="0..1; null before any reported turn.")
    invalid_load_rate = serializers.FloatField(allow_null=True, help_text="0..1; null before any reported turn.")
    decided_turns = serializers.IntegerField(help_text="Reported turns that invoked a skill.")
    decision_error_rate = serializers.FloatField(
        allow_null=True,
        help_text="0..1 of decided turns: a skill outside the loaded ones, or outside the report's expected label.",
    )
    routing_latency_ms = Latency()


class TurnCallIn(serializers.Serializer):
    messages = ChatMessage(many=True, help_text="The conversation so far (neutral or Anthropic shape), at most 500.")
    invoked = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=100,
        required=False,
        help_text="Skill names the model invoked in the previous turn (recorded as turns/ does).",
    )
    variables = serializers.DictField(required=False, help_text="Turn-scoped variables, as render takes them.")
    prefix_sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", required=False, help_text="The prefix the client holds.")
    format = serializers.ChoiceField(
        choices=["anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini"], required=False
    )
    k = serializers.IntegerField(min_value=1, max_value=20, default=5, required=False)


class TurnSkills(serializers.Serializer):
    resident = serializers.ListField(child=serializers.CharField())
    routed = RoutedSkill(many=True)
    session = serializers.ListField(child=serializers.CharField())
    demoted = serializers.ListField(child=serializers.CharField())
    categories = serializers.ListField(child=serializers.CharField())
    routing = serializers.ChoiceField(
        choices=["keywords"], required=False, help_text="Present while the version routes by keywords alone."
    )


class TurnPrefix(serializers.Serializer):
    system = serializers.CharField()
    tools = serializers.ListField(child=serializers.DictField())


class TurnCache(serializers.Serializer):
    prefix_tokens = serializers.IntegerField()
    floor = serializers.IntegerField(allow_null=True)
    cacheable = serializers.BooleanField(allow_null=True)
    reason = serializers.CharField()


class TurnReported(serializers.Serializer):
    turn = serializers.IntegerField()
    invoked = serializers.ListField(child=serializers.CharField())


class TurnReuse(serializers.Serializer):
    keys = serializers.ListField(child=serializers.CharField())
    list = serializers.CharField()
    messages = serializers.IntegerField()


class TurnCompaction(serializers.Serializer):
    elided = serializers.IntegerField()
    truncated = serializers.IntegerField()
    chars_before = serializers.IntegerField()
    chars_after = serializers.IntegerField()


class TurnCallOut(serializers.Serializer):
    turn = serializers.IntegerField()
    version = serializers.IntegerField()
    content_hash = serializers.CharField()
    prefix_sha256 = serializers.CharField()
    prefix = TurnPrefix(required=False, help_text="Absent when the request's prefix_sha256 matched.")
    prefix_unchanged = serializers.BooleanField(required=False)
    tail = serializers.CharField()
    notices = serializers.ListField(child=serializers.DictField(child=serializers.CharField()))
    skills = TurnSkills()
    reported = TurnReported(allow_null=True)
    messages = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        help_text="The compacted conversation, without format only: with format it is in request (once).",
    )
    compaction = TurnCompaction()
    format = serializers.CharField(required=False)
    request = serializers.DictField(required=False, help_text="The provider request body (when format is given).")
    request_reuse = TurnReuse(required=False, help_text="With prefix_unchanged: what to take from the held request.")
    request_notes = serializers.ListField(child=serializers.CharField(), required=False)
    cache = TurnCache()


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
