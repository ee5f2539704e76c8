"""Change requests over REST (four eyes on a label): their serializers and views. Thin: the rules
live in registry.changes."""

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, paginate, valid
from api.pagination import paginated
from core import limits
from registry import changes
from registry.changes import change_state_now


class ChangeApprovalOut(serializers.Serializer):
    approver = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class ChangeRequestOut(serializers.Serializer):
    """A change request (registry.changes): a move or release waiting for required approvals."""

    id = serializers.UUIDField()
    kind = serializers.CharField(help_text='"move" or "release".')
    state = serializers.SerializerMethodField(help_text="pending, applied, rejected, expired or failed.")
    request = serializers.JSONField(help_text="The request as made: bundle, label, targets (or moves), ...")
    revisions = serializers.JSONField(help_text="Each label's revision when requested: [{bundle, label, revision}].")
    required_approvals = serializers.IntegerField(
        source="required", help_text="Approvals needed (by identities other than the requester)."
    )
    approver_role = serializers.CharField()
    requester = serializers.CharField()
    reason = serializers.CharField()
    approvals = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField()
    decided_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.JSONField(help_text="applied: the label's state or the release id; failed: code, message.")

    def get_state(self, change) -> str:
        return change_state_now(change)

    @extend_schema_field(ChangeApprovalOut(many=True))
    def get_approvals(self, change) -> list[dict[str, Any]]:
        return list(ChangeApprovalOut(change.approvals.all(), many=True).data)


class ChangeRequestedOut(serializers.Serializer):
    """The 202 of a move or release that became a change request."""

    change = ChangeRequestOut()


class ChangeDecisionIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class ChangeQuery(serializers.Serializer):
    """Filters of GET /api/v1/changes/ (query parameters)."""

    state = serializers.ChoiceField(choices=["pending", "applied", "rejected", "expired", "failed"], required=False)


class ChangeListApi(BaseApi):
    @extend_schema(
        summary="List change requests",
        description=(
            "Moves and releases waiting for (or decided on) the approvals a label requires, newest first, "
            "of the bundles the key may see. `state` filters (`pending`: not expired). Paged by cursor."
        ),
        operation_id="changes_list",
        parameters=[ChangeQuery],
        responses=paginated(ChangeRequestOut),
    )
    def get(self, request: Request) -> Response:
        query = ChangeQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = changes.changes_visible(actor=actor_of(request), state=query.validated_data.get("state"))
        return paginate(self, request, rows, ChangeRequestOut, "-created_at")


class ChangeDetailApi(BaseApi):
    @extend_schema(
        summary="Get a change request", description="One change request and its approvals.", responses=ChangeRequestOut
    )
    def get(self, request: Request, change_id: Any) -> Response:
        return Response(ChangeRequestOut(changes.change_get(change_id=change_id, actor=actor_of(request))).data)


class ChangeApproveApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Approve a change request",
        description=(
            "By an identity other than the requester (403 otherwise) with the role the change's labels need "
            "(ops for a protected label, else publisher). The approval that makes the required number applies "
            "the change as its request would have been applied, with every check run again: 409 `change_stale` "
            "when a label moved since the request, the move's own 409 (`checks_required`, a breaking change) "
            "when it is refused now; either way the change is `failed`. 409 `change_not_pending` when it was "
            "decided or expired."
        ),
        request=ChangeDecisionIn,
        responses=ChangeRequestOut,
    )
    def post(self, request: Request, change_id: Any) -> Response:
        change = changes.change_get(change_id=change_id, actor=actor_of(request))
        data = valid(ChangeDecisionIn, request)
        decided = changes.change_approve(change=change, actor=actor_of(request), reason=data["reason"])
        return Response(ChangeRequestOut(changes.change_get(change_id=decided.pk, actor=actor_of(request))).data)


class ChangeRejectApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Reject (or withdraw) a change request",
        description=(
            "By anyone who may approve it, or by its requester (a withdrawal). 409 `change_not_pending` when it "
            "was decided or expired."
        ),
        request=ChangeDecisionIn,
        responses=ChangeRequestOut,
    )
    def post(self, request: Request, change_id: Any) -> Response:
        change = changes.change_get(change_id=change_id, actor=actor_of(request))
        data = valid(ChangeDecisionIn, request)
        decided = changes.change_reject(change=change, actor=actor_of(request), reason=data["reason"])
        return Response(ChangeRequestOut(changes.change_get(change_id=decided.pk, actor=actor_of(request))).data)
