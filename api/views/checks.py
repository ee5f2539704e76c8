"""A version's checks (CI results, evaluation runs) and approvals, bound to its content hash:
the serializers, then the views."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, valid
from core import limits
from core.errors import NotFound
from registry import selectors as registry_selectors
from registry import services as registry_services
from registry.models import CheckStatus


class CheckIn(StrictInput):
    """A check result from CI (type checks; the service checks names and URLs)."""

    name = StrictCharField(max_length=limits.CHECK_NAME_MAX)
    status = serializers.ChoiceField(choices=CheckStatus.choices)
    summary = StrictCharField(required=False, allow_blank=True, max_length=limits.CHECK_SUMMARY_MAX, default="")
    details_url = StrictCharField(required=False, allow_blank=True, max_length=limits.CHECK_DETAILS_URL_MAX, default="")


class CheckOut(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
    summary = serializers.CharField()
    details_url = serializers.CharField()
    content_hash = serializers.CharField(help_text="The content the result is about (not the version number).")
    version = serializers.SerializerMethodField()
    reported_by = serializers.CharField()
    reported_at = serializers.DateTimeField()
    evidence = serializers.JSONField(
        allow_null=True,
        help_text=(
            "For an `eval:<suite>` check: the run's id, the suite's hash and the attestation's digest "
            "(GET /api/v1/evals/{run}/ has the statement), or `stale: true` once the suite has a newer version."
        ),
    )
    stale = serializers.SerializerMethodField()

    def get_version(self, check) -> int:
        return self.context["version"]

    def get_stale(self, check) -> bool:
        return bool((check.evidence or {}).get("stale"))


class CheckListOut(serializers.Serializer):
    results = CheckOut(many=True)


class ApprovalIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class ApprovalOut(serializers.Serializer):
    approver = serializers.CharField()
    reason = serializers.CharField()
    content_hash = serializers.CharField(help_text="The content approved (not the version number).")
    version = serializers.SerializerMethodField()
    approved_at = serializers.DateTimeField()

    def get_version(self, approval) -> int:
        return self.context["version"]


class ApprovalListOut(serializers.Serializer):
    author = serializers.CharField(help_text="Who published the version: their approval never counts.")
    results = ApprovalOut(many=True)


class VersionCheckListApi(BaseApi):
    # ci is below agent: reading and reporting checks are what a ci key may do. The service
    # decides who may report (ci, ops, admin: not a publisher).
    roles = {"GET": Role.CI, "POST": Role.CI}

    @extend_schema(
        summary="List a version's checks",
        description=(
            "The latest report of each check name for the version's content hash, by name (not paged: a "
            "content hash has few checks)."
        ),
        operation_id="version_checks_list",
        responses=CheckListOut,
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        checks = registry_selectors.checks_latest(bundle_id=bundle.pk, content_hash=version.content_hash)
        return Response({"results": CheckOut(checks, many=True, context={"version": number}).data})

    @extend_schema(
        summary="Report a check",
        description=(
            "ci role (or ops). Records `{name, status, summary?, details_url?}` for the version's content hash: "
            "201 with the check. The latest report per name counts; a label with `required_checks` moves only "
            "to content whose every required check's latest report is `success`."
        ),
        request=CheckIn,
        responses={201: CheckOut},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(CheckIn, request)
        check = registry_services.check_report(version=version, actor=actor_of(request), **data)
        return Response(CheckOut(check, context={"version": number}).data, status=201)


class VersionApprovalListApi(BaseApi):
    # Reading is open to every role of the bundle; the service decides who may approve
    # (publisher, ops, admin; never the version's author; never ci).
    roles = {"GET": Role.AGENT, "POST": Role.PUBLISHER, "DELETE": Role.PUBLISHER}

    @extend_schema(
        summary="List a version's approvals",
        description="The approvals of the version's content hash, oldest first (one per approver; not paged).",
        operation_id="version_approvals_list",
        responses=ApprovalListOut,
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        approvals = registry_selectors.approvals_of(bundle_id=bundle.pk, content_hash=version.content_hash)
        results = ApprovalOut(approvals, many=True, context={"version": number}).data
        return Response({"author": version.author, "results": results})

    @extend_schema(
        summary="Approve a version",
        description=(
            "Publisher, ops or admin, other than the version's author (403: four eyes). Records `{reason}` for the "
            "version's content hash: 201 with the approval, or 200 with the earlier one if this identity already "
            "approved it (it counts once). A label with `required_approvals: N` moves only to content that N "
            "distinct identities approved (409 `approvals_required` otherwise)."
        ),
        request=ApprovalIn,
        responses={201: ApprovalOut, 200: ApprovalOut},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(ApprovalIn, request)
        approval, created = registry_services.approval_record(version=version, actor=actor_of(request), **data)
        return Response(ApprovalOut(approval, context={"version": number}).data, status=201 if created else 200)

    @extend_schema(
        summary="Withdraw your approval",
        description="Withdraws the caller's own approval of the version's content, with `{reason}`: 204, or 404.",
        request=ApprovalIn,
        responses={204: None},
    )
    def delete(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(ApprovalIn, request)
        if not registry_services.approval_withdraw(version=version, actor=actor_of(request), **data):
            raise NotFound("You have not approved this version.")
        return Response(status=204)
