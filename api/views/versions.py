"""Versions of a bundle: publish, read, diff, usage and revoke. Their serializers, then their views."""

import json
from dataclasses import asdict
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.answers import etag_matches
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, not_modified, paginate, valid
from api.pagination import paginated
from api.views.bundles import DEPENDENTS_HELP, DEPENDENTS_TOTAL_HELP, DependentOut
from core import limits
from core.errors import InvalidContent
from metrics import selectors as metrics_selectors
from registry import selectors as registry_selectors
from registry import services as registry_services
from registry.contracts import LEVELS
from registry.models import BundleVersion


class VersionIn(StrictInput):
    content = serializers.JSONField()
    message = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class RevokeIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class VersionOut(serializers.Serializer):
    number = serializers.IntegerField()
    content_hash = serializers.CharField()
    content = serializers.SerializerMethodField()
    message = serializers.CharField()
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    state = serializers.CharField()
    active_sessions = serializers.IntegerField()
    drained_at = serializers.DateTimeField(allow_null=True)

    def get_content(self, version) -> dict:
        # Decoded from the stored canonical bytes, so it is exactly what was published.
        return json.loads(bytes(version.canonical))


class PublishWarningOut(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()


class PublishOut(VersionOut):
    """A publish answer: the version, what the contract checks warn about, and the bundles that
    include this one."""

    warnings = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField(
        help_text=(
            "The content's model as written (`name`) and its model-catalog entry (`catalog`: provider, name with "
            "aliases resolved, retires_at, replacement; null for a model the catalog does not know)."
        )
    )
    dependents = serializers.SerializerMethodField(help_text=DEPENDENTS_HELP)
    dependents_total = serializers.SerializerMethodField(help_text=DEPENDENTS_TOTAL_HELP)

    @extend_schema_field(PublishWarningOut(many=True))
    def get_warnings(self, version: BundleVersion) -> list[dict[str, str]]:
        # What version_publish returned, handed over by the view (not a field of the version).
        return list(self.context.get("warnings", []))

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_model(self, version: BundleVersion) -> dict[str, Any] | None:
        model: dict[str, Any] | None = self.context.get("model")
        return model

    @extend_schema_field(DependentOut(many=True))
    def get_dependents(self, version: BundleVersion) -> list[dict[str, Any]]:
        # Read by the view (registry.selectors.dependents_first), not a field of the version.
        return list(self.context.get("dependents", []))

    def get_dependents_total(self, version: BundleVersion) -> int:
        return int(self.context.get("dependents_total", 0))


class ChangeOut(serializers.Serializer):
    level = serializers.ChoiceField(choices=LEVELS)
    kind = serializers.CharField()
    path = serializers.CharField()
    message = serializers.CharField()
    tool = serializers.CharField(allow_null=True)


class DiffOut(serializers.Serializer):
    bundle = serializers.CharField()
    from_version = serializers.IntegerField()
    to_version = serializers.IntegerField()
    level = serializers.ChoiceField(choices=LEVELS)
    changes = ChangeOut(many=True)


class DiffQuery(serializers.Serializer):
    against = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1)


class VersionUsageOut(serializers.Serializer):
    bundle = serializers.CharField()
    version = serializers.IntegerField()
    sessions_started = serializers.IntegerField()
    sessions_active = serializers.IntegerField()
    fetches = serializers.IntegerField(help_text="Pinned-bundle fetches (200 and 304), counted within about 5 s.")
    first_used_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


class VersionListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="List versions",
        description="The bundle's versions, newest first, each with its content. Paged by cursor, at most 20 a page.",
        operation_id="versions_list",
        responses=paginated(VersionOut),
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        # Each version carries its content (up to 1 MiB): a smaller page bounds the answer.
        return paginate(
            self, request, registry_selectors.versions_of(bundle), VersionOut, "-number", limits.VERSION_PAGE_SIZE
        )

    @extend_schema(
        summary="Publish a version",
        description=(
            "Publisher role. Validates the content document, runs the publish-time contract checks and stores"
            " the canonical bytes as the next version: 201 with the version and the checks' `warnings`. "
            "Content identical to an existing version of this bundle answers 200 with that version (no new "
            "number), so publishing is idempotent. 400 `validation_error` names each problem by its path. "
            "`ETag` is the content hash. `{{> bundle@label}}` or `{{> bundle@3}}` in `system_prompt` includes "
            "that bundle's prompt, resolved now and pinned by hash (`includes`, `system_prompt_source`); 403 "
            "for an included bundle outside the key's scope. `dependents`: the bundles whose latest version "
            "includes this one, the first 100 by name; `dependents_total`: how many in all (GET "
            ".../dependents/ pages them)."
        ),
        request=VersionIn,
        responses={201: PublishOut, 200: PublishOut},
    )
    def post(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(VersionIn, request)
        result = registry_services.version_publish(
            bundle=bundle, content=data["content"], message=data["message"], actor=actor_of(request)
        )
        version = registry_selectors.version_get(bundle=bundle, number=result.version.number)
        dependents, total = registry_selectors.dependents_first(bundle_name=bundle.name, actor=actor_of(request))
        context = {
            "warnings": result.warnings,
            "model": result.model,
            "dependents": dependents,
            "dependents_total": total,
        }
        answer = PublishOut(version, context=context).data
        response = Response(answer, status=201 if result.created else 200)
        response["ETag"] = f'"{version.content_hash}"'
        return response


class VersionDetailApi(BaseApi):
    @extend_schema(
        summary="Get a version",
        description=(
            "One version with its content, state and active session count. `ETag` is the content hash; a "
            "matching `If-None-Match` answers 304 with no body."
        ),
        responses={200: VersionOut, 304: OpenApiResponse(description="Not modified")},
    )
    def get(self, request: Request, name: str, number: int) -> Response | HttpResponse:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        if etag_matches(request.headers.get("If-None-Match"), version.content_hash):
            return not_modified(version.content_hash)
        response = Response(VersionOut(version).data)
        response["ETag"] = f'"{version.content_hash}"'
        return response


class VersionDiffApi(BaseApi):
    """How version `number` differs from `against` (default: the version before it)."""

    @extend_schema(
        summary="Diff two versions",
        description=(
            "How version `number` differs from `against` (default: the version before it): each change with "
            "its kind, path and level, and the whole classified as `patch`, `minor` or `major`."
        ),
        parameters=[DiffQuery],
        responses=DiffOut,
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        query = DiffQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        new = registry_selectors.version_get(bundle=bundle, number=number)
        against = query.validated_data.get("against", number - 1)
        if against < 1:
            raise InvalidContent("Version 1 has no version before it.", {"against": ["Give ?against=<number>."]})
        old = registry_selectors.version_get(bundle=bundle, number=against)
        diff = registry_selectors.version_diff(old=old, new=new)
        return Response(
            DiffOut({"bundle": bundle.name, "from_version": old.number, "to_version": new.number, **asdict(diff)}).data
        )


class VersionUsageApi(BaseApi):
    """Sessions started and active on this version, pinned fetches, first and last use."""

    @extend_schema(summary="Usage of one version", responses=VersionUsageOut)
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        return Response(VersionUsageOut(metrics_selectors.version_usage(version=version)).data)


class VersionRevokeApi(BaseApi):
    roles = {"POST": Role.OPS}

    @extend_schema(
        summary="Revoke a version",
        description=(
            "Ops role. Takes the version out of service for good: its sessions get 410 `version_revoked` and "
            "no label may point at it. A reason is required. 409 while a label targets it; revoking again "
            "answers 200."
        ),
        request=RevokeIn,
        responses=VersionOut,
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(RevokeIn, request)
        registry_services.version_revoke(version=version, actor=actor_of(request), reason=data["reason"])
        return Response(VersionOut(registry_selectors.version_get(bundle=bundle, number=number)).data)
