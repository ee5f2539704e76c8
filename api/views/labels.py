"""Labels of a bundle: read, create or move (with a rollout guard), change the policy, history
and rollback. Their serializers, then their views."""

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.actors import Actor
from access.models import Role
from api.authentication import actor_of
from api.common import (
    BaseApi,
    StrictBooleanField,
    StrictCharField,
    StrictInput,
    StrictIntegerField,
    if_match,
    paginate,
    valid,
    version_or_targets,
)
from api.pagination import paginated
from api.views.bundles import DEPENDENTS_HELP, DEPENDENTS_TOTAL_HELP, DependentOut
from api.views.changes import ChangeRequestedOut, ChangeRequestOut
from core import limits
from evidence import rollouts
from registry import changes
from registry import selectors as registry_selectors
from registry import services as registry_services
from registry.models import Bundle, Compatibility
from registry.selectors import label_targets_out


class TargetIn(StrictInput):
    version = StrictIntegerField(min_value=1)
    weight = StrictIntegerField(min_value=0, max_value=100)


RETIRING_HELP = "Move to a version whose model retires within MODEL_RETIREMENT_WARNING anyway (else 409)."


class LabelIn(StrictInput):
    version = StrictIntegerField(min_value=1, required=False)
    # A percentage rollout instead of one version: weights are integers summing to 100.
    targets = TargetIn(many=True, required=False, allow_empty=False, max_length=limits.MAX_SPLIT_TARGETS)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )
    compatibility = serializers.ChoiceField(choices=Compatibility.choices, required=False)
    # A rollout guard for a split (ops; docs/operations.md#guarded-rollouts): set with the move.
    guard = serializers.JSONField(required=False)


class LabelPolicyIn(StrictInput):
    """PATCH of a label's policy: any of the four fields, and a reason."""

    protected = StrictBooleanField(required=False)
    compatibility = serializers.ChoiceField(choices=Compatibility.choices, required=False)
    required_approvals = StrictIntegerField(required=False, min_value=0, max_value=limits.REQUIRED_APPROVALS_MAX)
    required_checks = serializers.ListField(
        child=StrictCharField(max_length=limits.CHECK_NAME_MAX),
        required=False,
        max_length=limits.REQUIRED_CHECKS_MAX,
    )
    # A split label's rollout guard (ops); null removes it.
    guard = serializers.JSONField(required=False, allow_null=True)
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class RollbackIn(StrictInput):
    to_version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )


class LabelOut(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField(source="version.number", help_text="The primary target (largest weight).")
    targets = serializers.SerializerMethodField(help_text="Every target with its weight; one at 100 unless split.")
    revision = serializers.IntegerField(help_text="Changes with every change of the label; its ETag is rev-N.")
    protected = serializers.BooleanField()

    def get_targets(self, label) -> list[dict[str, int]]:
        return label_targets_out(label)

    compatibility = serializers.CharField()
    required_checks = serializers.ListField(
        child=serializers.CharField(), help_text="Checks a new target's content must have passed."
    )
    required_approvals = serializers.IntegerField()
    updated_at = serializers.DateTimeField()
    updated_by = serializers.CharField()


class LabelMovedOut(LabelOut):
    """A PUT's answer: the label, and the bundles that include its bundle by this label."""

    dependents = serializers.SerializerMethodField(help_text=DEPENDENTS_HELP)
    dependents_total = serializers.SerializerMethodField(help_text=DEPENDENTS_TOTAL_HELP)

    @extend_schema_field(DependentOut(many=True))
    def get_dependents(self, label) -> list[dict[str, Any]]:
        # Read by the view (registry.selectors.dependents_first), not a field of the label.
        return list(self.context.get("dependents", []))

    def get_dependents_total(self, label) -> int:
        return int(self.context.get("dependents_total", 0))


class LabelMoveOut(serializers.Serializer):
    from_version = serializers.IntegerField(source="previous_version.number", allow_null=True, default=None)
    to_version = serializers.IntegerField(source="version.number")
    targets = serializers.SerializerMethodField()
    release = serializers.UUIDField(allow_null=True)

    def get_targets(self, row) -> list[dict[str, int]]:
        return label_targets_out(row)

    by = serializers.CharField(source="updated_by")
    reason = serializers.CharField(source="history_change_reason", allow_null=True)
    at = serializers.DateTimeField(source="history_date")
    note = serializers.CharField(source="move_note")
    kind = serializers.CharField(source="change_kind", help_text='"move", or "policy" for a change of its policy.')
    protected = serializers.BooleanField()
    compatibility = serializers.CharField()
    required_checks = serializers.ListField(child=serializers.CharField())
    required_approvals = serializers.IntegerField()


T = TypeVar("T")


def guarded(
    data: dict[str, Any], change: Callable[[], T], *, bundle: Bundle, label: str, actor: Actor, reason: str
) -> T:
    """`change()`, or with `data["guard"]` (taken out of `data`) the change and the guard in one
    transaction (evidence.rollouts.label_change_guarded: ops, the guard checked first)."""
    if "guard" not in data:
        return change()
    guard = data.pop("guard")
    return rollouts.label_change_guarded(
        bundle=bundle, label_name=label, guard=guard, actor=actor, reason=reason, change=change
    )


def _label_answer(label, status: int = 200) -> Response:
    response = Response(LabelOut(label).data, status=status)
    response["ETag"] = registry_services.label_etag(label)
    return response


class LabelListApi(BaseApi):
    @extend_schema(
        summary="List labels",
        description=(
            "The bundle's labels, by name: the version each targets, whether it is protected, its "
            "compatibility policy, and who moved it last. Paged by cursor."
        ),
        operation_id="labels_list",
        responses=paginated(LabelOut),
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        labels = bundle.labels.select_related("version")
        return paginate(self, request, labels, LabelOut, "name")


class LabelDetailApi(BaseApi):
    roles = {"PUT": Role.PUBLISHER, "PATCH": Role.OPS}

    @extend_schema(
        summary="Get a label",
        description="One label: its target version, protection, compatibility policy and last move.",
        responses=LabelOut,
    )
    def get(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        return _label_answer(registry_selectors.label_get(bundle=bundle, name=label))

    @extend_schema(
        summary="Create or move a label",
        description=(
            "Publisher role (ops for a protected label such as `production`). Points the label at `version` "
            "with a required reason: 201 when created, 200 when moved. New sessions on the label pin the new "
            "target; the version it leaves starts draining. A `backward` label refuses a breaking (major) "
            "move with 409 unless `allow_breaking` is true. A label with `required_approvals` whose new target "
            "lacks them turns the move into a change request: 202 with `{change}` "
            "(POST /api/v1/changes/{id}/approve/). "
            "`dependents`: the bundles whose latest version "
            "includes this bundle by this label, and whether their next publish would pick up other bytes: the "
            "first 100 by name; `dependents_total`: how many in all."
        ),
        request=LabelIn,
        responses={200: LabelMovedOut, 201: LabelMovedOut, 202: ChangeRequestedOut},
    )
    def put(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(LabelIn, request)
        version, targets = version_or_targets(bundle, data)

        def move() -> changes.MoveOutcome:
            return changes.label_move_or_request(
                bundle=bundle,
                name=label,
                version=version,
                targets=targets,
                actor=actor_of(request),
                reason=data["reason"],
                allow_breaking=data["allow_breaking"],
                allow_retiring=data["allow_retiring"],
                compatibility=data.get("compatibility"),
                expected_revision=if_match(request),
                must_not_exist=request.headers.get("If-None-Match", "").strip() == "*",
            )

        # with `guard`: the move and the rollout guard in one transaction (guarded, above)
        outcome = guarded(data, move, bundle=bundle, label=label, actor=actor_of(request), reason=data["reason"])
        if outcome.change is not None:
            return Response({"change": ChangeRequestOut(outcome.change).data}, status=202)
        moved, created = outcome.label, outcome.created
        assert moved is not None
        # Who includes this bundle by this label: their next publish picks up the new target.
        dependents, total = registry_selectors.dependents_first(bundle_name=name, actor=actor_of(request), label=label)
        answer = LabelMovedOut(moved, context={"dependents": dependents, "dependents_total": total}).data
        response = Response(answer, status=201 if created else 200)
        response["ETag"] = registry_services.label_etag(moved)
        return response

    @extend_schema(
        summary="Change a label's policy",
        description=(
            "Ops role. Sets any of `protected`, `compatibility`, `required_approvals` (0 to 10 distinct "
            "approvals a new target's content needs) and "
            "`required_checks` (check names a new target's content hash must have passed), with a required "
            "reason and the usual If-Match. Recorded in the label's history as a `policy` change; the label's "
            "targets do not change."
        ),
        request=LabelPolicyIn,
        responses=LabelOut,
    )
    def patch(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(LabelPolicyIn, request)
        reason = data.pop("reason")
        policy_only = "guard" not in data

        def policy() -> None:
            if data or policy_only:  # read after guarded() took the guard out of `data`
                registry_services.label_policy_set(
                    bundle=bundle,
                    name=label,
                    changes=data,
                    actor=actor_of(request),
                    reason=reason,
                    expected_revision=if_match(request),
                )

        guarded(data, policy, bundle=bundle, label=label, actor=actor_of(request), reason=reason)
        return _label_answer(registry_selectors.label_get(bundle=bundle, name=label))


class LabelHistoryApi(BaseApi):
    @extend_schema(
        summary="Label history",
        description=(
            "Every move of the label, newest first: from and to version, by whom, why, when, and what the "
            "compatibility check said. Paged by cursor."
        ),
        operation_id="label_history_list",
        responses=paginated(LabelMoveOut),
    )
    def get(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        found = registry_selectors.label_get(bundle=bundle, name=label)
        return paginate(self, request, registry_selectors.label_history(found), LabelMoveOut, "-history_id")


class LabelRollbackApi(BaseApi):
    roles = {"POST": Role.OPS}

    @extend_schema(
        summary="Roll a label back",
        description=(
            "Ops role. Moves the label to `to_version`, or to the version it targeted before its current one,"
            " with a required reason. 409 when there is nothing to roll back to or it already targets that "
            "version."
        ),
        request=RollbackIn,
        responses=LabelOut,
    )
    def post(self, request: Request, name: str, label: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(RollbackIn, request)
        to_version = None
        if data.get("to_version") is not None:
            to_version = registry_selectors.version_get(bundle=bundle, number=data["to_version"])
        moved = registry_services.label_rollback(
            bundle=bundle,
            name=label,
            to_version=to_version,
            actor=actor_of(request),
            reason=data["reason"],
            allow_breaking=data["allow_breaking"],
            allow_retiring=data["allow_retiring"],
            expected_revision=if_match(request),
        )
        return _label_answer(moved)
