"""Atomic releases over REST: their serializers and views. Thin: the rules live in registry.releases."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import (
    BaseApi,
    IdentifierField,
    StrictBooleanField,
    StrictCharField,
    StrictInput,
    StrictIntegerField,
    etag_revision,
    valid,
    version_or_targets,
)
from api.views.changes import ChangeRequestedOut, ChangeRequestOut
from api.views.labels import RETIRING_HELP, TargetIn
from core import limits
from core.errors import InvalidContent
from registry import changes, releases
from registry import selectors as registry_selectors


class ReleaseMoveIn(StrictInput):
    bundle = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    label = IdentifierField(max_length=limits.LABEL_NAME_MAX)  # type: ignore[assignment]  # a field named label
    version = StrictIntegerField(min_value=1, required=False)
    targets = TargetIn(many=True, required=False, allow_empty=False, max_length=limits.MAX_SPLIT_TARGETS)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    if_match = StrictCharField(required=False, max_length=100, help_text="The label's ETag, as If-Match.")


class ReleaseIn(StrictInput):
    moves = ReleaseMoveIn(many=True, allow_empty=False, max_length=limits.RELEASE_MAX_MOVES)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )
    dry_run = StrictBooleanField(required=False, default=False)


class ReleaseRollbackIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_retiring = StrictBooleanField(required=False, default=False, help_text=RETIRING_HELP)


class ReleaseOut(serializers.Serializer):
    id = serializers.UUIDField()
    reason = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    allow_breaking = serializers.BooleanField()
    items = serializers.JSONField(
        help_text="Per label: bundle, label, before and after ({version, targets, revision, etag})."
    )
    rollback_of = serializers.UUIDField(source="rollback_of_id", allow_null=True)
    rolled_back_by = serializers.SerializerMethodField()

    def get_rolled_back_by(self, release) -> str | None:
        back = getattr(release, "rolled_back_by", None)
        return str(back.pk) if back is not None else None


class ReleasePreviewOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    moves = serializers.JSONField(
        help_text="Per move: current, becomes_live, leaving (draining, sessions), compatibility, allowed."
    )


def _moves(request: Request, data: dict[str, Any]) -> list[releases.ReleaseMove]:
    moves = []
    for index, item in enumerate(data["moves"]):
        bundle = registry_selectors.bundle_get(name=item["bundle"], actor=actor_of(request))
        try:
            version, targets = version_or_targets(bundle, item)
        except InvalidContent as exc:
            raise InvalidContent(exc.message, {f"moves[{index}].{k}": v for k, v in exc.details.items()}) from None
        expected = etag_revision(item["if_match"]) if "if_match" in item else None
        moves.append(releases.ReleaseMove(bundle, item["label"], targets or [(version, 100)], expected))
    return moves


class ReleaseListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Apply an atomic release (or preview it)",
        description=(
            "Moves several labels, across bundles, all or none, in one transaction: each move names an "
            "existing label and a `version` or a percentage split in `targets`, optionally with `if_match` "
            "(the label's ETag). Protection and compatibility apply to each move as for a label PUT. "
            "`dry_run: true` answers 200 with each move's impact and changes nothing; otherwise 201 with the "
            "release, whose id appears in each label's history; 202 with `{change}` when a label's required "
            "approvals turn the release into a change request."
        ),
        request=ReleaseIn,
        responses={201: ReleaseOut, 200: ReleasePreviewOut, 202: ChangeRequestedOut},
    )
    def post(self, request: Request) -> Response:
        data = valid(ReleaseIn, request)
        moves = _moves(request, data)
        if data["dry_run"]:
            impact = releases.release_preview(moves=moves, actor=actor_of(request))
            return Response({"dry_run": True, "moves": impact})
        outcome = changes.release_apply_or_request(
            moves=moves,
            actor=actor_of(request),
            reason=data["reason"],
            allow_breaking=data["allow_breaking"],
            allow_retiring=data["allow_retiring"],
        )
        if outcome.change is not None:
            return Response({"change": ChangeRequestOut(outcome.change).data}, status=202)
        assert outcome.release is not None
        return Response(ReleaseOut(outcome.release).data, status=201)


class ReleaseDetailApi(BaseApi):
    @extend_schema(
        summary="Get a release",
        description="A release: its reason, author, and each label's state before and after it.",
        responses=ReleaseOut,
    )
    def get(self, request: Request, release_id: Any) -> Response:
        return Response(ReleaseOut(registry_selectors.release_get(release_id=release_id, actor=actor_of(request))).data)


class ReleaseRollbackApi(BaseApi):
    roles = {"POST": Role.OPS}

    @extend_schema(
        summary="Roll a release back as a whole",
        description=(
            "Ops role. Puts every label of the release back where it stood before it, as one new release "
            "(201). 409 when one of its labels changed after it, or when it was rolled back already."
        ),
        request=ReleaseRollbackIn,
        responses={201: ReleaseOut},
    )
    def post(self, request: Request, release_id: Any) -> Response:
        release = registry_selectors.release_get(release_id=release_id, actor=actor_of(request))
        data = valid(ReleaseRollbackIn, request)
        back = releases.release_rollback(
            release=release, actor=actor_of(request), reason=data["reason"], allow_retiring=data["allow_retiring"]
        )
        return Response(ReleaseOut(back).data, status=201)
