"""Thin REST views: parse, call one service or selector, render. No rules live here."""

import re
from dataclasses import asdict
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.models import Role
from api.answers import etag_matches
from api.authentication import actor_of
from api.pagination import Cursor, paginated
from api.serializers import (
    AuditEventOut,
    AuditQuery,
    BundleIn,
    BundleOut,
    CatalogEntryOut,
    ChangeRequestedOut,
    ChangeRequestOut,
    DiffOut,
    DiffQuery,
    LabelIn,
    LabelMovedOut,
    LabelMoveOut,
    LabelOut,
    LabelPolicyIn,
    PublishOut,
    RevokeIn,
    RollbackIn,
    SessionOut,
    VersionIn,
    VersionOut,
    VersionUsageOut,
)
from api.views_guard import guarded
from audit import selectors as audit_selectors
from core import limits
from core.errors import InvalidContent, NotFound
from metrics import selectors as metrics_selectors
from registry import changes
from registry import selectors as registry_selectors
from registry import services as registry_services
from sessions_app import selectors as session_selectors


class BaseApi(APIView):
    """Base of every view here: refuses path values no row can hold before any query runs."""

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        # A NUL in a name (/bundles/a%00b/) cannot be stored in PostgreSQL text, so nothing can
        # exist at that address; comparing with it would be a database error, i.e. a 500.
        if any(isinstance(value, str) and "\x00" in value for value in kwargs.values()):
            raise NotFound("Nothing exists at this address.")


def _valid(serializer_class, request: Request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _not_modified(content_hash: str) -> HttpResponse:
    response = HttpResponse(status=304)
    response["ETag"] = f'"{content_hash}"'
    return response


def _paginate(
    view: APIView, request: Request, queryset, serializer_class, ordering: str, max_page_size: int | None = None
) -> Response:
    paginator = Cursor()
    paginator.ordering = ordering
    if max_page_size is not None:
        paginator.page_size = paginator.max_page_size = max_page_size
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


class BundleListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="List bundles",
        description=(
            "The bundles this key may see (all, or those matching its scope), by name, with their labels and "
            "latest version number. Paged by cursor."
        ),
        operation_id="bundles_list",
        responses=paginated(BundleOut),
    )
    def get(self, request: Request) -> Response:
        return _paginate(
            self, request, registry_selectors.bundles_with_labels(actor=actor_of(request)), BundleOut, "name"
        )

    @extend_schema(
        summary="Create a bundle",
        description=(
            "Publisher role. 201 with the bundle; 409 `conflict` if the name exists; 403 when the name is "
            "outside the key's scope. The name never changes afterwards."
        ),
        request=BundleIn,
        responses={201: BundleOut},
    )
    def post(self, request: Request) -> Response:
        data = _valid(BundleIn, request)
        bundle = registry_services.bundle_create(
            name=data["name"], description=data["description"], when_to_use=data["when_to_use"], actor=actor_of(request)
        )
        bundle = registry_selectors.bundles_with_labels(actor=actor_of(request)).get(pk=bundle.pk)
        return Response(BundleOut(bundle).data, status=201)


class BundleDetailApi(BaseApi):
    @extend_schema(
        summary="Get a bundle",
        description=(
            "One bundle: description, when to use it, its labels (`{label: version}`) and latest version number."
        ),
        responses=BundleOut,
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundles_with_labels(actor=actor_of(request)).filter(name=name).first()
        if bundle is None:
            registry_selectors.bundle_get(name=name, actor=actor_of(request))  # raises the contract's 404
        return Response(BundleOut(bundle).data)


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
        return _paginate(
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
        data = _valid(VersionIn, request)
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
            return _not_modified(version.content_hash)
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
        data = _valid(RevokeIn, request)
        registry_services.version_revoke(version=version, actor=actor_of(request), reason=data["reason"])
        return Response(VersionOut(registry_selectors.version_get(bundle=bundle, number=number)).data)


_ETAG = re.compile(r'^(?:W/)?"rev-([1-9][0-9]{0,9})"$')


def _if_match(request: Request) -> int | None:
    """If-Match as the label services take it (see _etag_revision); None without the header."""
    header = request.headers.get("If-Match")
    return None if header is None else _etag_revision(header)


def _etag_revision(header: str) -> int:
    """0 for `*` (the label must exist), or the revision our ETag names ("rev-N"). A tag we
    never issued matches nothing: -1."""
    tags = [tag.strip() for tag in header.split(",") if tag.strip()]
    if "*" in tags:
        return 0
    for tag in tags:
        found = _ETAG.match(tag)
        if found:
            return int(found.group(1))
    return -1


def _label_answer(label, status: int = 200) -> Response:
    response = Response(LabelOut(label).data, status=status)
    response["ETag"] = registry_services.label_etag(label)
    return response


def _version_or_targets(bundle, data: dict) -> tuple[Any, Any]:
    """`version` alone, or `targets` as (version, weight) pairs; exactly one of them."""
    if ("version" in data) == ("targets" in data):
        raise InvalidContent("Give version or targets.", {"version": ["Give either version or targets, not both."]})
    if "version" in data:
        return registry_selectors.version_get(bundle=bundle, number=data["version"]), None
    return None, [
        (registry_selectors.version_get(bundle=bundle, number=t["version"]), t["weight"]) for t in data["targets"]
    ]


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
        return _paginate(self, request, labels, LabelOut, "name")


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
        data = _valid(LabelIn, request)
        version, targets = _version_or_targets(bundle, data)

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
                expected_revision=_if_match(request),
                must_not_exist=request.headers.get("If-None-Match", "").strip() == "*",
            )

        # with `guard`: the move and the rollout guard in one transaction (api.views_guard)
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
        data = _valid(LabelPolicyIn, request)
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
                    expected_revision=_if_match(request),
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
        return _paginate(self, request, registry_selectors.label_history(found), LabelMoveOut, "-history_id")


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
        data = _valid(RollbackIn, request)
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
            expected_revision=_if_match(request),
        )
        return _label_answer(moved)


class SessionDetailApi(BaseApi):
    @extend_schema(
        summary="Get a session",
        description=(
            "The session: its pinned version and content hash, status and lease. Visible to the key that "
            "started it and to ops."
        ),
        responses=SessionOut,
    )
    def get(self, request: Request, session_id) -> Response:
        return Response(SessionOut(session_selectors.session_get(session_id=session_id, actor=actor_of(request))).data)


class CatalogApi(BaseApi):
    """What this key may start sessions on, derived from the key alone (the client never says who it is)."""

    @extend_schema(
        summary="Capability catalog",
        description=(
            "The bundles this key may start sessions on (in its scope, with at least one label), each with "
            "its description, when to use it and its labels, derived from the key alone. Paged by cursor."
        ),
        operation_id="catalog_list",
        responses=paginated(CatalogEntryOut),
    )
    def get(self, request: Request) -> Response:
        return _paginate(self, request, registry_selectors.catalog(actor=actor_of(request)), CatalogEntryOut, "name")


class AuditApi(BaseApi):
    roles = {"GET": Role.OPS}

    @extend_schema(
        summary="Audit log",
        description=(
            "Ops role. Every state change, newest first, filtered by action, actor, target and time; a scoped"
            " key sees only events about its bundles. Never holds content or secrets. Paged by cursor."
        ),
        operation_id="audit_list",
        parameters=[AuditQuery],
        responses=paginated(AuditEventOut),
    )
    def get(self, request: Request) -> Response:
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        events = audit_selectors.audit_events(actor_scope=actor_of(request), **query.validated_data)
        return _paginate(self, request, events, AuditEventOut, "-id")
