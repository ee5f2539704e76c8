"""Evaluation pages: the suites (a list, a new suite with its cases and scorers, a suite's
versions with a form for the next one), two runs side by side, and a version's evaluations
(its runs, the worker's jobs, and starting a run on the worker). Writes go to the services the
API calls (evals.services.suite_create and suite_version_publish, evals.jobs.job_start), so the
validation is the API's; the forms only parse what was typed (adminui.suite_forms)."""

import json
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.actors import Actor
from access.models import Role
from adminui import suite_forms
from adminui.forms import add_domain_error
from adminui.views.base import bundle_of, need_role, need_view, render, url, version_of
from core.errors import DomainError, InvalidContent
from evals import content as suite_content
from evals import jobs, selectors, services
from evals.models import Suite
from evidence.pricing import input_output
from registry.checks import CHECK_REPORTERS
from registry.models import BundleVersion

DEFAULT_ROWS = 6


def suite_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
    return render(
        request,
        model_admin,
        "adminui/suite_list.html",
        "Evaluation suites",
        suites=selectors.suites_all(),
        can_publish=actor.has_role(Role.PUBLISHER),
    )


def _rows_count(request: HttpRequest) -> int:
    try:
        return max(
            1, min(int(request.POST.get("rows") or request.GET.get("rows") or DEFAULT_ROWS), suite_forms.MAX_ROWS)
        )
    except ValueError:
        return DEFAULT_ROWS


def _bound(request: HttpRequest) -> Any:
    """The posted data to validate; None for "More rows" (what was typed is shown again, unjudged)."""
    return request.POST if request.method == "POST" and "more" not in request.POST else None


def _document(form: suite_forms.SuiteVersionForm, rows: list[dict[str, str]]) -> tuple[Any, dict[int, list[str]], Any]:
    """(the suite document, row problems, rows of each case) from the JSON box and the rows;
    a problem of the typing itself is on the form already (document None)."""
    try:
        from_json = suite_forms.items_from_json(form.cleaned_data.get("items_json", ""))
    except ValueError as exc:
        form.add_error("items_json", str(exc))
        from_json = []
    items, row_problems, rows_of = suite_forms.items_from_rows(rows)
    problems = {i: [p] for i, p in row_problems.items()}
    if form.errors or problems:
        return None, problems, rows_of
    return {"items": [*from_json, *items]}, problems, (len(from_json), rows_of)


def _publish(
    form: suite_forms.SuiteVersionForm, rows: list[dict[str, str]], suite: Suite | None, new: Any, actor: Actor
) -> tuple[Any, dict[int, list[str]]]:
    """Publish through the services the API calls (their validation): a new suite with its first
    version when `new` (a SuiteForm), else the suite's next version: (the result, problems by row)."""
    doc, problems, placing = _document(form, rows)
    if doc is None:
        return None, problems
    try:
        message = form.cleaned_data["message"]
        if suite is None:  # the suite and its first version, both or neither
            return services.suite_create_published(
                name=new.cleaned_data["name"],
                description=new.cleaned_data["description"],
                content_doc=doc,
                message=message,
                actor=actor,
            ), problems
        return services.suite_version_publish(suite=suite, content_doc=doc, message=message, actor=actor), problems
    except InvalidContent as exc:
        if "name" in exc.details and new is not None:
            add_domain_error(new, exc)
            return None, problems
        box, by_row = suite_forms.place_problems(exc, from_json=placing[0], rows_of=placing[1])
        for message in box:
            form.add_error("items_json", message)
        return None, {**problems, **by_row}
    except DomainError as exc:
        add_domain_error(new if new is not None else form, exc, default="name" if new is not None else None)
        return None, problems


def suite_new(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
    need_role(actor, Role.PUBLISHER, "Writing a suite")
    count = _rows_count(request)
    bound = _bound(request)
    new = suite_forms.SuiteForm(bound, initial=request.POST or None)
    form = suite_forms.SuiteVersionForm(bound, initial=request.POST or {"message": "first version"})
    rows = suite_forms.rows_from(request.POST, count) if request.method == "POST" else [{}] * count
    problems: dict[int, list[str]] = {}
    status = 200
    if new.is_bound and new.is_valid() & form.is_valid():
        result, problems = _publish(form, rows, None, new, actor)
        if result is not None:
            messages.success(request, f"Created the suite {result.version.suite.name}, version 1.")
            return HttpResponseRedirect(url("adminui_suite", result.version.suite.name))
        status = 400
    return _form_page(request, model_admin, "New evaluation suite", new, form, rows, problems, status, count)


def _form_page(
    request: HttpRequest,
    model_admin: ModelAdmin,
    title: str,
    new: Any,
    form: Any,
    rows: list[Any],
    problems: dict[int, list[str]],
    status: int,
    count: int,
    **extra: Any,
) -> HttpResponse:
    if "more" in request.POST:
        count = min(count + DEFAULT_ROWS, suite_forms.MAX_ROWS)
        rows = [*rows, *[{}] * (count - len(rows))]
    return render(
        request,
        model_admin,
        "adminui/suite_form.html",
        title,
        status=status,
        new=new,
        form=form,
        rows=[{"index": i, "values": row, "problems": problems.get(i, [])} for i, row in enumerate(rows)],
        rows_count=len(rows),
        kinds=suite_forms.KINDS,
        **extra,
    )


def suite_detail(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = need_view(request, model_admin)
    suite = selectors.suite_get(name=name)
    versions = selectors.suite_versions(suite=suite)
    latest = suite_content.stored(versions[0].canonical)["items"] if versions else []
    count = _rows_count(request)
    initial = request.POST or {"items_json": "\n".join(json.dumps(i, ensure_ascii=False) for i in latest)}
    form = suite_forms.SuiteVersionForm(_bound(request), initial=initial)
    rows = suite_forms.rows_from(request.POST, count) if request.method == "POST" else [{}] * count
    problems: dict[int, list[str]] = {}
    status = 200
    if form.is_bound and form.is_valid():
        result, problems = _publish(form, rows, suite, None, actor)
        if result is not None:
            said = "Published" if result.created else "Nothing new: the same content is"
            messages.success(request, f"{said} version {result.version.number} of {suite.name}.")
            if result.stale_checks:
                messages.warning(request, f"{result.stale_checks} eval:{suite.name} check(s) are stale now.")
            return HttpResponseRedirect(url("adminui_suite", suite.name))
        status = 400
    return _form_page(
        request,
        model_admin,
        f"Suite {suite.name}",
        None,
        form,
        rows,
        problems,
        status,
        count,
        suite=suite,
        versions=versions,
        latest_items=latest,
        can_publish=actor.has_role(Role.PUBLISHER),
    )


def _run_choice(run: Any) -> tuple[str, str]:
    when = run.created_at.strftime("%Y-%m-%d %H:%M")
    text = f"{run.bundle.name} v{run.version.number} · {run.suite_version.suite.name}@{run.suite_version.number}"
    return str(run.id), f"{text} · {run.pass_rate:.0%} · {run.model} · {when}"


def eval_compare(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Two runs side by side per item, flips first (evals.selectors.runs_compare, as the API's
    GET /evals/compare/); the runs are those of bundles the person may see (all, in the admin)."""
    need_view(request, model_admin)
    chosen = {key: request.GET.get(key, "") for key in ("a", "b")}
    comparison = None
    error = ""
    if chosen["a"] and chosen["b"]:
        try:
            ids = {key: str(UUID(value)) for key, value in chosen.items()}
            comparison = selectors.runs_compare(
                a=selectors.run_get(run_id=ids["a"]), b=selectors.run_get(run_id=ids["b"])
            )
        except ValueError:
            error = "Pick two runs."
        except DomainError as exc:
            error = exc.message
    return render(
        request,
        model_admin,
        "adminui/eval_compare.html",
        "Compare evaluation runs",
        status=400 if error else 200,
        choices=[_run_choice(r) for r in selectors.runs_recent()],
        chosen=chosen,
        comparison=comparison,
        error=error,
    )


def version_evals(version: BundleVersion, actor: Actor) -> dict[str, Any]:
    """The version page's evaluations: its runs, the worker's jobs, what a run may be started with."""
    return {
        "runs": list(selectors.runs_of(version=version)[:20]),
        "jobs": list(selectors.jobs_of(version=version)[:10]),
        "providers": [p.public() for p in settings.EVAL_PROVIDERS.values()],
        "suites": [s for s in selectors.suites_all() if getattr(s, "latest", None)],
        "may_start": actor.role in CHECK_REPORTERS,
    }


def eval_start(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    """Start a run on the worker (POST only): evals.jobs.job_start, as POST .../evals/start/."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    version = version_of(bundle, number)
    back = url("adminui_version", bundle.name, version.number) + "#evaluations"
    if request.method != "POST":
        return HttpResponseRedirect(back)
    try:
        suite_version = selectors.suite_version_get(suite=selectors.suite_get(name=request.POST.get("suite", "")))
        job = jobs.job_start(
            version=version,
            suite_version=suite_version,
            provider_name=request.POST.get("provider", ""),
            runs=int(request.POST.get("runs") or 1),
            threshold=float(request.POST.get("threshold") or 1),
            actor=actor,
            price_of=input_output,
        )
    except (ValueError, DomainError) as exc:
        said = getattr(exc, "message", None) or "runs and threshold are numbers."
        details = getattr(exc, "details", None) or {}
        more = "; ".join(f"{' '.join(map(str, v))}" for v in details.values() if isinstance(v, list))
        messages.error(request, f"Not started: {said} {more}".strip())
        return HttpResponseRedirect(back)
    messages.success(request, f"Queued a run of {suite_version.suite.name}@{suite_version.number} ({job.id}).")
    return HttpResponseRedirect(back)
