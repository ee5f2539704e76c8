"""Reads of suites and evaluation runs."""

from typing import Any
from uuid import UUID

from django.db.models import Max, QuerySet

from core.errors import NotFound
from evals.models import EvalJob, EvalRun, Suite, SuiteVersion
from registry.models import BundleVersion


def suite_get(*, name: str) -> Suite:
    suite = Suite.objects.filter(name=name).first()
    if suite is None:
        raise NotFound(f"No suite named {name!r}.")
    return suite


def suite_version_get(*, suite: Suite, number: int | None = None) -> SuiteVersion:
    """Version `number` of the suite, or its latest when `number` is None."""
    versions = SuiteVersion.objects.filter(suite=suite)
    found = versions.filter(number=number).first() if number is not None else versions.order_by("-number").first()
    if found is None:
        raise NotFound(f"Suite {suite.name!r} has no version {number if number is not None else ''}".rstrip() + ".")
    return found


def runs_of(*, version: BundleVersion) -> QuerySet[EvalRun]:
    return EvalRun.objects.filter(bundle_id=version.bundle_id, content_hash=version.content_hash).select_related(
        "suite_version__suite", "version"
    )


def run_get(*, run_id: UUID | str) -> EvalRun:
    run = EvalRun.objects.filter(pk=run_id).select_related("suite_version__suite", "version", "bundle").first()
    if run is None:
        raise NotFound("No such evaluation run.")
    return run


def runs_compare(*, a: EvalRun, b: EvalRun) -> dict[str, Any]:
    """Two runs side by side per item, the differences that matter first: items whose verdict
    flipped, then cost and tokens. Runs on different suite versions compare the items they share."""

    def per_item(run: EvalRun) -> dict[str, dict[str, Any]]:
        items: dict[str, dict[str, Any]] = {}
        for result in run.results:
            row = items.setdefault(result["item"], {"runs": 0, "passed": 0, "output_tokens": 0, "cost_usd": 0.0})
            row["runs"] += 1
            row["passed"] += int(result["passed"])
            row["output_tokens"] += int((result["reply"].get("usage") or {}).get("output_tokens", 0))
            cost = result["reply"].get("cost_usd")
            row["cost_usd"] = None if cost is None or row["cost_usd"] is None else row["cost_usd"] + cost
        return items

    left, right = per_item(a), per_item(b)
    rows = []
    for item in sorted(set(left) & set(right)):
        x, y = left[item], right[item]
        rate_a, rate_b = x["passed"] / x["runs"], y["passed"] / y["runs"]
        rows.append(
            {
                "item": item,
                "a": {**x, "pass_rate": rate_a},
                "b": {**y, "pass_rate": rate_b},
                "flip": "fixed" if rate_a < 1 <= rate_b else "broken" if rate_b < 1 <= rate_a else None,
                "pass_rate_change": rate_b - rate_a,
            }
        )
    rows.sort(key=lambda r: (r["flip"] is None, -abs(r["pass_rate_change"]), r["item"]))
    return {
        "a": {"run": str(a.id), "version": a.version.number, "pass_rate": a.pass_rate, "cost_usd": a.cost_usd},
        "b": {"run": str(b.id), "version": b.version.number, "pass_rate": b.pass_rate, "cost_usd": b.cost_usd},
        "same_suite": a.suite_version_id == b.suite_version_id,
        "only_in_a": sorted(set(left) - set(right)),
        "only_in_b": sorted(set(right) - set(left)),
        "items": rows,
    }


def job_get(*, job_id: UUID | str) -> EvalJob:
    job = EvalJob.objects.filter(pk=job_id).select_related("version__bundle", "suite_version__suite").first()
    if job is None:
        raise NotFound("No such evaluation job.")
    return job


def jobs_of(*, version: BundleVersion) -> QuerySet[EvalJob]:
    return EvalJob.objects.filter(version=version).select_related("suite_version__suite", "version__bundle")


def suites_all() -> list[Suite]:
    """Every suite (at most 1,000), each with `latest` (its latest version number, or None)."""
    return list(Suite.objects.annotate(latest=Max("versions__number")).order_by("name")[:1000])


def suite_versions(*, suite: Suite) -> list[SuiteVersion]:
    return list(SuiteVersion.objects.filter(suite=suite).order_by("-number")[:1000])


def runs_recent(*, limit: int = 200) -> list[EvalRun]:
    """The latest runs of every bundle, for the compare page's choices (no results loaded)."""
    return list(
        EvalRun.objects.select_related("bundle", "version", "suite_version__suite")
        .defer("results", "attestation", "version__canonical", "suite_version__canonical")
        .order_by("-created_at")[:limit]
    )
