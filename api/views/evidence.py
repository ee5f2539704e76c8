"""The evidence (docs/api.md#evidence): the In and Out schemas of an end's outcome, a score and a
rollout guard, and the thin views over evidence.selectors and evidence.rollouts (a version's
evidence, two compared, a label's guard). The rules are evidence's."""

from datetime import date, datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput
from core.errors import InvalidContent, NotFound
from evidence import rollouts
from evidence import selectors as evidence_selectors
from registry import selectors as registry_selectors
from registry.models import Bundle


class EndIn(StrictInput):
    """An end's optional body: `outcome` {"status", "reason"?} (checked by
    evidence.services.outcome_in). No body, or an empty object, is a plain end."""

    outcome = serializers.JSONField(required=False, allow_null=True)


class ScoreIn(StrictInput):
    """A score's body (checked by evidence.services.score_in, which both lanes call)."""

    name = serializers.CharField(max_length=100)
    value = serializers.FloatField()
    # `source`: a field named like Field.source (the stubs type that attribute): a declaration.
    source = serializers.CharField(required=False, max_length=100)  # type: ignore[assignment]
    comment = serializers.CharField(required=False, max_length=4000)
    id = serializers.CharField(required=False, max_length=200)


class ScoreOut(serializers.Serializer):
    id = serializers.CharField()
    session = serializers.UUIDField()
    name = serializers.CharField()
    value = serializers.FloatField()
    source = serializers.CharField()  # type: ignore[assignment]  # see ScoreIn.source
    comment = serializers.CharField()
    at = serializers.DateTimeField()


def score_out(score: Any) -> dict[str, Any]:
    """A recorded score as ScoreOut describes it (`id`: the client's id when it gave one), the
    answer of POST .../scores/ in both lanes (api/routes.py)."""
    return {
        "id": score.client_id if score.client_id is not None else str(score.pk),
        "session": str(score.session_id),
        "name": score.name,
        "value": score.value,
        "source": score.source,
        "comment": score.comment,
        "at": score.at,
    }


class GuardIn(serializers.Serializer):
    """A rollout guard (checked by evidence.rollouts.guard_spec; docs/operations.md)."""

    metrics = serializers.JSONField()
    min_sessions = serializers.IntegerField(required=False)
    action = serializers.ChoiceField(choices=["hold", "rollback"], required=False)
    promote_steps = serializers.ListField(child=serializers.IntegerField(), required=False)
    reason = serializers.CharField()


class GuardOverrideIn(StrictInput):
    action = serializers.ChoiceField(choices=["pause", "resume", "acknowledge"])
    reason = StrictCharField(max_length=1000)


WINDOW = [
    OpenApiParameter("since", str, description="First UTC day counted (YYYY-MM-DD), inclusive"),
    OpenApiParameter("until", str, description="Last UTC day counted (YYYY-MM-DD), inclusive"),
]


def _day(request: Request, name: str) -> date | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        return datetime.fromisoformat(raw).date() if "T" in raw else date.fromisoformat(raw)
    except ValueError:
        raise InvalidContent(f"{name} is not a date.", {name: ["A date, YYYY-MM-DD."]}) from None


def _number(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "")
    if not raw.isdigit() or not 1 <= int(raw) <= 2**31 - 1:
        raise InvalidContent(f"{name} is not a version number.", {name: ["A version number (1 or more)."]})
    return int(raw)


def _label(request: Request) -> str | None:
    raw = request.query_params.get("label")
    if raw is not None and (not raw or len(raw) > 50 or "\x00" in raw):
        raise InvalidContent("label is not a label name.", {"label": ["A label name."]})
    return raw


class VersionEvidenceApi(BaseApi):
    """How a version does in production: outcomes, scores, tokens, measured cache reads, cost,
    tool errors and latency, each with its n (and a 95 % interval where it has one)."""

    @extend_schema(
        summary="Evidence of one version",
        parameters=[*WINDOW, OpenApiParameter("label", str, description="Only sessions started through this label")],
        responses={200: OpenApiResponse(description="The version's evidence (docs/api.md#evidence)")},
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        arm = evidence_selectors.Arm(version, _label(request))
        since, until = _day(request, "since"), _day(request, "until")
        return Response(evidence_selectors.version_evidence(arm, since=since, until=until))


def _arms(request: Request, bundle: Bundle) -> tuple[Any, Any]:
    label = _label(request)
    if "a" not in request.query_params and "b" not in request.query_params and label is not None:
        found = registry_selectors.label_get(bundle=bundle, name=label)
        if len(found.targets) < 2:
            raise InvalidContent(
                f"Label {label!r} is not split; compare two versions with ?a=&b=.", {"label": ["Not a split label."]}
            )
        versions = {
            t["version_id"]: registry_selectors.version_get(bundle=bundle, number=t["number"]) for t in found.targets
        }
        return evidence_selectors.split_arms(targets=found.targets, versions=versions, label=label)
    a = registry_selectors.version_get(bundle=bundle, number=_number(request, "a"))
    b = registry_selectors.version_get(bundle=bundle, number=_number(request, "b"))
    return evidence_selectors.Arm(a, label), evidence_selectors.Arm(b, label)


class EvidenceCompareApi(BaseApi):
    """Version b against version a (or a split label's newer arm against its older one): each
    metric's difference with its 95 % interval and a verdict under the documented method."""

    @extend_schema(
        summary="Compare the evidence of two versions",
        parameters=[
            *WINDOW,
            OpenApiParameter("a", int, description="The baseline version"),
            OpenApiParameter("b", int, description="The version compared with it"),
            OpenApiParameter("label", str, description="A split label: its arms (without a and b), or a filter"),
        ],
        responses={200: OpenApiResponse(description="Differences, intervals and verdicts (docs/api.md#evidence)")},
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        a, b = _arms(request, bundle)
        since, until = _day(request, "since"), _day(request, "until")
        return Response(evidence_selectors.arms_compared(a, b, since=since, until=until))


class LabelGuardApi(BaseApi):
    """A split label's rollout guard (docs/operations.md#guarded-rollouts): PUT sets it (ops),
    GET shows it with its last verdict, DELETE removes it (ops)."""

    @extend_schema(summary="A label's rollout guard", responses={200: OpenApiResponse(description="The guard")})
    def get(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        found = registry_selectors.label_get(bundle=bundle, name=label)
        return Response(rollouts.guard_out(_guard_of(found)))

    @extend_schema(
        summary="Guard a split label's rollout",
        request=GuardIn,
        responses={200: OpenApiResponse(description="The guard")},
    )
    def put(self, request: Request, name: str, label: str) -> Response:
        actor = actor_of(request)
        bundle = registry_selectors.bundle_get(name=name, actor=actor)
        data = request.data if isinstance(request.data, dict) else {}
        spec = {k: v for k, v in data.items() if k != "reason"}
        guard = rollouts.guard_set(
            bundle=bundle, label_name=label, spec=spec, actor=actor, reason=data.get("reason", "")
        )
        return Response(rollouts.guard_out(guard))

    @extend_schema(summary="Remove a label's rollout guard", responses={204: None})
    def delete(self, request: Request, name: str, label: str) -> Response:
        actor = actor_of(request)
        bundle = registry_selectors.bundle_get(name=name, actor=actor)
        found = registry_selectors.label_get(bundle=bundle, name=label)
        rollouts.guard_remove(guard=_guard_of(found), actor=actor, reason=request.query_params.get("reason", ""))
        return Response(status=204)


class LabelGuardOverrideApi(BaseApi):
    """Ops overrides a guard: pause, resume, or acknowledge a hold / rollback and continue."""

    @extend_schema(
        summary="Override a rollout guard",
        request=GuardOverrideIn,
        responses={200: OpenApiResponse(description="The guard")},
    )
    def post(self, request: Request, name: str, label: str) -> Response:
        actor = actor_of(request)
        bundle = registry_selectors.bundle_get(name=name, actor=actor)
        found = registry_selectors.label_get(bundle=bundle, name=label)
        data = _valid_override(request)
        guard = rollouts.guard_override(
            guard=_guard_of(found), action=data["action"], actor=actor, reason=data["reason"]
        )
        return Response(rollouts.guard_out(guard))


def _guard_of(label: Any) -> Any:
    guard = rollouts.guard_of(label=label)
    if guard is None:
        raise NotFound(f"Label {label.name!r} has no guard.")
    return guard


def _valid_override(request: Request) -> dict[str, Any]:
    serializer = GuardOverrideIn(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
