"""Evaluation suites and runs (docs/evals.md): serializers, then thin views over evals.services
and evals.selectors."""

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, StrictIntegerField, valid
from core.errors import InvalidContent
from evals import content as suite_content
from evals import jobs, selectors, services
from evals.models import SUITE_NAME_MAX, EvalRun, Suite, SuiteVersion
from evidence.pricing import input_output
from registry import selectors as registry_selectors


class SuiteIn(StrictInput):
    name = StrictCharField(max_length=SUITE_NAME_MAX)
    description = StrictCharField(required=False, allow_blank=True, default="", max_length=2_000)


class SuiteOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField()


class SuiteVersionIn(StrictInput):
    content = serializers.JSONField(help_text="The suite document: {items: [{id, input, expect, tags}]}.")
    message = StrictCharField(max_length=10_000)


class SuiteVersionOut(serializers.Serializer):
    suite = serializers.CharField(source="suite.name")
    number = serializers.IntegerField()
    content_hash = serializers.CharField()
    message = serializers.CharField()
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    items = serializers.SerializerMethodField()

    def get_items(self, version: SuiteVersion) -> int:
        return len(suite_content.stored(version.canonical)["items"])


class SuiteListOut(serializers.Serializer):
    results = SuiteOut(many=True)


class SuiteVersionListOut(serializers.Serializer):
    results = SuiteVersionOut(many=True)


class RunIn(StrictInput):
    suite = StrictCharField(max_length=SUITE_NAME_MAX)
    suite_version = StrictIntegerField(min_value=1)
    provider = StrictCharField(max_length=40)
    model = StrictCharField(max_length=200)
    runs = StrictIntegerField(min_value=1, max_value=services.MAX_RUNS, default=1)
    threshold = serializers.FloatField(min_value=0, max_value=1)
    results = serializers.ListField(child=serializers.JSONField(), max_length=services.MAX_RESULTS)


class StartIn(StrictInput):
    suite = StrictCharField(max_length=SUITE_NAME_MAX)
    suite_version = StrictIntegerField(min_value=1, required=False)
    provider = StrictCharField(max_length=40, help_text="A provider the operator named in EVAL_PROVIDERS.")
    runs = StrictIntegerField(min_value=1, max_value=services.MAX_RUNS, default=1)
    threshold = serializers.FloatField(min_value=0, max_value=1, default=1.0)


class JobOut(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField(help_text="queued, running, done (run recorded), stopped (budget), failed.")
    detail = serializers.CharField()
    bundle = serializers.CharField(source="version.bundle.name")
    version = serializers.IntegerField(source="version.number")
    suite = serializers.CharField(source="suite_version.suite.name")
    suite_version = serializers.IntegerField(source="suite_version.number")
    provider = serializers.CharField()
    model = serializers.CharField()
    runs = serializers.IntegerField()
    threshold = serializers.FloatField()
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    spent_usd = serializers.FloatField()
    run = serializers.UUIDField(source="run_id", allow_null=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class PlanIn(StrictInput):
    suite = StrictCharField(max_length=SUITE_NAME_MAX)
    suite_version = StrictIntegerField(min_value=1, required=False)


class RunSummaryOut(serializers.Serializer):
    id = serializers.UUIDField()
    bundle = serializers.CharField(source="bundle.name")
    version = serializers.IntegerField(source="version.number")
    content_hash = serializers.CharField()
    suite = serializers.CharField(source="suite_version.suite.name")
    suite_version = serializers.IntegerField(source="suite_version.number")
    suite_hash = serializers.CharField(source="suite_version.content_hash")
    provider = serializers.CharField()
    model = serializers.CharField()
    runs = serializers.IntegerField()
    threshold = serializers.FloatField()
    total = serializers.IntegerField()
    passed = serializers.IntegerField()
    pass_rate = serializers.FloatField()
    status = serializers.CharField()
    cost_usd = serializers.FloatField(allow_null=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()

    def get_fields(self) -> dict[str, serializers.Field]:
        # `errors` is a Serializer attribute (validation errors), so the count is added here.
        fields = super().get_fields()
        fields["errors"] = serializers.IntegerField(help_text="Replies that were a provider error (never a pass).")
        return fields


class RunOut(RunSummaryOut):
    results = serializers.JSONField()
    attestation = serializers.JSONField()


class RunListOut(serializers.Serializer):
    results = RunSummaryOut(many=True)


def _suite_version_answer(version: SuiteVersion, *, with_content: bool) -> dict[str, Any]:
    data: dict[str, Any] = dict(SuiteVersionOut(version).data)
    if with_content:
        data["content"] = suite_content.stored(version.canonical)
    return data


class SuiteListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(summary="List suites", operation_id="suites_list", responses=SuiteListOut)
    def get(self, request: Request) -> Response:
        return Response({"results": SuiteOut(Suite.objects.all()[:1000], many=True).data})

    @extend_schema(summary="Create a suite", request=SuiteIn, responses={201: SuiteOut})
    def post(self, request: Request) -> Response:
        data = valid(SuiteIn, request)
        suite = services.suite_create(name=data["name"], description=data["description"], actor=actor_of(request))
        return Response(SuiteOut(suite).data, status=201)


class SuiteDetailApi(BaseApi):
    @extend_schema(summary="Get a suite", operation_id="suite_get", responses=SuiteOut)
    def get(self, request: Request, name: str) -> Response:
        suite = selectors.suite_get(name=name)
        versions = SuiteVersion.objects.filter(suite=suite).order_by("-number")
        latest = versions.first()
        return Response(
            {**SuiteOut(suite).data, "latest_version": latest.number if latest else None, "versions": versions.count()}
        )


class SuiteVersionListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(summary="List a suite's versions", operation_id="suite_versions_list", responses=SuiteVersionListOut)
    def get(self, request: Request, name: str) -> Response:
        suite = selectors.suite_get(name=name)
        versions = SuiteVersion.objects.filter(suite=suite).order_by("-number")[:1000]
        return Response({"results": [_suite_version_answer(v, with_content=False) for v in versions]})

    @extend_schema(
        summary="Publish a suite version",
        description=(
            "publisher role. 201 with the new version, or 200 with the existing one when the canonical content "
            "is the same (publishing is idempotent, as for bundles). A new version makes the `eval:<suite>` "
            "checks of older runs stale (`stale_checks` says how many)."
        ),
        request=SuiteVersionIn,
        responses={201: SuiteVersionOut, 200: SuiteVersionOut},
    )
    def post(self, request: Request, name: str) -> Response:
        suite = selectors.suite_get(name=name)
        data = valid(SuiteVersionIn, request)
        result = services.suite_version_publish(
            suite=suite, content_doc=data["content"], message=data["message"], actor=actor_of(request)
        )
        answer = {**_suite_version_answer(result.version, with_content=False), "stale_checks": result.stale_checks}
        return Response(answer, status=201 if result.created else 200)


class SuiteVersionDetailApi(BaseApi):
    @extend_schema(
        summary="Get a suite version with its content", operation_id="suite_version_get", responses=SuiteVersionOut
    )
    def get(self, request: Request, name: str, number: int) -> Response:
        version = selectors.suite_version_get(suite=selectors.suite_get(name=name), number=number)
        return Response(_suite_version_answer(version, with_content=True))


class EvalPlanApi(BaseApi):
    @extend_schema(
        summary="Check a suite against a version before running it",
        description="Every reason an item cannot run on this version (variables), all at once: 200 {problems: [...]}.",
        request=PlanIn,
        responses={200: OpenApiResponse(description="{suite, suite_version, problems}")},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(PlanIn, request)
        suite_version = selectors.suite_version_get(
            suite=selectors.suite_get(name=data["suite"]), number=data.get("suite_version")
        )
        problems = services.eval_plan(version=version, suite_version=suite_version)
        content = suite_content.stored(suite_version.canonical)
        return Response(
            {"suite": data["suite"], "suite_version": suite_version.number, "problems": problems, "content": content}
        )


class EvalRunListApi(BaseApi):
    roles = {"GET": Role.CI, "POST": Role.CI}

    @extend_schema(summary="List a version's evaluation runs", responses=RunListOut)
    def get(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        runs = selectors.runs_of(version=version).select_related("bundle")[:200]
        return Response({"results": RunSummaryOut(runs, many=True).data})

    @extend_schema(
        summary="Record an evaluation run",
        description=(
            "ci role (or ops). The runner's replies for every item x run of the suite version; the registry scores "
            "them, stores the run and reports the check `eval:<suite>` on the version's content hash with an in-toto "
            "attestation: 201 with the run."
        ),
        request=RunIn,
        responses={201: RunOut},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(RunIn, request)
        suite_version = selectors.suite_version_get(
            suite=selectors.suite_get(name=data["suite"]), number=data["suite_version"]
        )
        run = services.eval_run_record(
            version=version,
            suite_version=suite_version,
            provider=data["provider"],
            model=data["model"],
            runs=data["runs"],
            threshold=data["threshold"],
            results=data["results"],
            actor=actor_of(request),
        )
        return Response(RunOut(run).data, status=201)


def _run_for(request: Request, run_id: UUID | str) -> EvalRun:
    run = selectors.run_get(run_id=run_id)
    registry_selectors.bundle_get(name=run.bundle.name, actor=actor_of(request))  # scope: 404 outside it
    return run


class EvalRunDetailApi(BaseApi):
    roles = {"GET": Role.CI}

    @extend_schema(summary="Get an evaluation run with its results and attestation", responses=RunOut)
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response(RunOut(_run_for(request, run_id)).data)


class EvalCompareApi(BaseApi):
    roles = {"GET": Role.CI}

    @extend_schema(
        summary="Two evaluation runs side by side, flips first",
        description=(
            "ci role (or higher). `?a=RUN&b=RUN`: both runs per item (pass rate, output tokens, cost), items whose "
            "verdict flipped first (`broken`, `fixed`), then by the size of the change."
        ),
        parameters=[
            OpenApiParameter("a", str, required=True, description="A run id"),
            OpenApiParameter("b", str, required=True, description="A run id"),
        ],
        responses=OpenApiResponse(description="{a, b, same_suite, only_in_a, only_in_b, items: [...]}"),
    )
    def get(self, request: Request) -> Response:
        ids = {key: request.query_params.get(key, "") for key in ("a", "b")}
        for key, value in ids.items():
            try:
                ids[key] = str(UUID(value))
            except ValueError:
                raise InvalidContent("a and b are run ids.", {key: ["A run id (UUID)."]}) from None
        return Response(selectors.runs_compare(a=_run_for(request, ids["a"]), b=_run_for(request, ids["b"])))


class EvalStartApi(BaseApi):
    roles = {"POST": Role.CI}

    @extend_schema(
        summary="Start an evaluation run on the worker",
        description=(
            "ci role (or ops). The registry runs the suite on this version itself, through a provider the "
            "operator configured (EVAL_PROVIDERS), and records it as `promptreg eval run` does. Everything is "
            "checked first: 400 for an unknown provider, items the version cannot take (all listed) or a model "
            "the catalog has no price for; 409 `budget_spent` when the run's upper estimate does not fit the "
            "day's EVAL_DAILY_BUDGET_USD. 202 with the job; poll `GET /api/v1/evals/jobs/{id}/`."
        ),
        request=StartIn,
        responses={202: JobOut},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        actor = actor_of(request)
        bundle = registry_selectors.bundle_get(name=name, actor=actor)
        version = registry_selectors.version_get(bundle=bundle, number=number)
        data = valid(StartIn, request)
        suite_version = selectors.suite_version_get(
            suite=selectors.suite_get(name=data["suite"]), number=data.get("suite_version")
        )
        job = jobs.job_start(
            version=version,
            suite_version=suite_version,
            provider_name=data["provider"],
            runs=data["runs"],
            threshold=data["threshold"],
            actor=actor,
            price_of=input_output,
        )
        return Response(JobOut(selectors.job_get(job_id=job.id)).data, status=202)


class EvalJobApi(BaseApi):
    roles = {"GET": Role.CI}

    @extend_schema(summary="Get an evaluation run made by the worker", responses=JobOut)
    def get(self, request: Request, job_id: UUID) -> Response:
        job = selectors.job_get(job_id=job_id)
        registry_selectors.bundle_get(name=job.version.bundle.name, actor=actor_of(request))  # scope: 404 outside
        return Response(JobOut(job).data)
