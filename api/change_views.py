"""Change requests over REST (four eyes on a label). Thin: the rules live in registry.changes."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.pagination import paginated
from api.serializers import ChangeDecisionIn, ChangeQuery, ChangeRequestOut
from api.views import BaseApi, _paginate, _valid
from registry import changes


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
        return _paginate(self, request, rows, ChangeRequestOut, "-created_at")


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
        data = _valid(ChangeDecisionIn, request)
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
        data = _valid(ChangeDecisionIn, request)
        decided = changes.change_reject(change=change, actor=actor_of(request), reason=data["reason"])
        return Response(ChangeRequestOut(changes.change_get(change_id=decided.pk, actor=actor_of(request))).data)
