"""Version pages: the searchable list, writing a version (with "check against vN"), a version's
detail, the diff of two versions and revoking one. Writes go to registry.services
(version_publish, version_revoke); the pre-checks are registry.lifecycle's previews."""

import json
from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.actors import Actor
from access.models import Role
from adminui import selectors
from adminui.diffing import OTHER_FIELDS, content_diff, pretty
from adminui.evidence import version_evidence_rows
from adminui.forms import JSON_FIELDS, RevokeForm, VersionForm, VersionSearchForm, add_domain_error
from adminui.moves import classify
from adminui.tool_cards import HEADINGS, tool_cards
from adminui.views.base import bundle_of, content_of, need_role, need_view, render, url, version_choices, version_of
from adminui.views.governance import approvals_panel
from adminui.workbench import MAX_PREVIEW_JSON, check_against, provider_preview
from core.errors import DomainError, Forbidden, InvalidContent, NotFound
from knowledge.templatetags.knowledge_admin import example_variables
from metrics.selectors import version_usage
from registry import services as registry_services
from registry.canonical import DEFAULTS
from registry.lifecycle import version_publish_check, version_revoke_preview
from registry.models import Bundle, BundleVersion, VersionState
from registry.services import PublishResult
from skills.selectors import version_skills_panel
from turns import providers


def version_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Every version of every bundle, searchable (replaces the stock list, whose "40@1" and US
    dates said little): by bundle, message, author, a content-hash prefix or `bundle@n`."""
    need_view(request, model_admin)
    form = VersionSearchForm(
        request.GET or None,
        bundles=selectors.bundle_names(),
        states=list(VersionState.choices),
    )
    versions = selectors.version_search(form.cleaned_data if form.is_valid() else None)
    page_obj = Paginator(versions, 50).get_page(request.GET.get("page"))
    labels = selectors.labels_on_versions([v.pk for v in page_obj])
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        model_admin,
        "adminui/version_list.html",
        "Versions",
        form=form,
        page_obj=page_obj,
        rows=[{"version": v, "labels": labels.get(v.pk, [])} for v in page_obj],
        query=query.urlencode(),
    )


def version_new(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    latest = selectors.version_latest(bundle)
    source = version_of(bundle, request.GET["from"]) if request.GET.get("from") else latest
    status = 200
    identical = None
    verdict = None
    if request.method == "POST" and "check" in request.POST:
        form = VersionForm(request.POST)
        verdict = _check_only(form, bundle, source, actor)
    elif request.method == "POST":
        form = VersionForm(request.POST)
        if not form.is_valid():
            _precheck(form, bundle, actor)
        else:
            try:
                result = registry_services.version_publish(
                    bundle=bundle, content=form.content(), message=form.cleaned_data["message"], actor=actor
                )
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                if result.created:
                    _report_publish(request, bundle, latest, result)
                    return HttpResponseRedirect(url("adminui_version", bundle.name, result.version.number))
                identical = result.version  # say so, and keep what was typed
    else:
        need_role(actor, Role.PUBLISHER, "Writing a version")
        form = VersionForm(initial=VersionForm.initial_from(content_of(source) if source else {"system_prompt": ""}))
    return render(
        request,
        model_admin,
        "adminui/version_form.html",
        f"New version of {bundle.name}",
        status=status,
        bundle=bundle,
        form=form,
        source=source,
        identical=identical,
        verdict=verdict,
        problems=_verdict_problems(form, verdict) if verdict is not None else [],
        version_choices=version_choices(bundle, exclude_revoked=False),
    )


def _verdict_problems(form: VersionForm, verdict: Any) -> list[dict[str, str]]:
    """The verdict's errors and warnings, each with the id of the box it is about (the field its
    path names: `content.tools[0].name` is the tools box), for the links at the top of the form."""

    def field_id(path: str) -> str:
        head = path.removeprefix("content.").split(".")[0].split("[")[0]
        return form[head].auto_id if head in form.fields else ""

    problems = [
        {"kind": "error", "path": path, "message": str(message), "field": field_id(path)}
        for path, messages in verdict.errors.items()
        for message in (messages if isinstance(messages, list) else [messages])
    ]
    problems += [
        {"kind": "warning", "path": w.path, "message": w.message, "field": field_id(w.path)} for w in verdict.warnings
    ]
    return problems


def _check_only(form: VersionForm, bundle: Bundle, source: BundleVersion | None, actor: Actor) -> object:
    """ "Check against vN": the verdict without publishing; a missing message does not stop it."""
    form.is_valid()
    if not set(form.errors) <= {"message"}:
        _precheck(form, bundle, actor)
        return None
    form.errors.pop("message", None)
    try:
        return check_against(
            bundle=bundle,
            content=form.content(),
            against=source,
            actor=actor,
            message=form.cleaned_data.get("route_message") or "",
        )
    except DomainError as exc:
        add_domain_error(form, exc)
        return None


def _report_publish(request: HttpRequest, bundle: Bundle, latest: BundleVersion | None, result: PublishResult) -> None:
    version = result.version
    messages.success(request, f"Saved version {version.number} of {bundle.name}.")
    if latest is not None:
        check = classify(content_of(latest), content_of(version))
        # A major change is saved but is news to act on: a warning, not a green tick.
        report = messages.warning if check.level == "major" else messages.info
        report(
            request,
            f"Contract check against v{latest.number}: a {check.level} change "
            f"({len(check.changes)} change{'s' if len(check.changes) != 1 else ''}, listed below).",
        )
    for warning in result.warnings:
        where = str(warning.get("path", "")).removeprefix("content.")
        messages.warning(request, f"Warning, {where}: {warning.get('message', '')}")


def _precheck(form: VersionForm, bundle: Bundle, actor: Actor) -> None:
    """When the form has errors (bad JSON, no message), show the content's own problems with
    them, all at once: registry.lifecycle.version_publish_check (what version_publish would
    say) on the fields that did parse; its contract findings only when every JSON field parsed."""
    try:
        check = version_publish_check(bundle=bundle, content=form.content(), actor=actor)
    except (InvalidContent, Forbidden) as exc:
        add_domain_error(form, exc)
        return
    if any(name in form.errors for name in JSON_FIELDS):
        return  # a field that did not parse would be checked as empty: its errors would mislead
    if check.errors:
        add_domain_error(form, InvalidContent("The bundle contradicts itself.", check.errors))


def version_detail(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    version = version_of(bundle, number)
    content = content_of(version)
    previous = selectors.version_before(bundle, version.number)
    return render(
        request,
        model_admin,
        "adminui/version_detail.html",
        f"{bundle.name} v{version.number}",
        crumb=f"v{version.number}",
        bundle=bundle,
        version=version,
        content=content,
        tool_cards=tool_cards(content.get("tools")),
        json_fields=[
            (key, HEADINGS.get(key, key), pretty(content.get(key)))
            for key in ("tools", *OTHER_FIELDS)
            if key in content or key in DEFAULTS  # optional fields: shown when present
        ],
        previous=previous,
        changes=content_diff(content_of(previous), content) if previous else None,
        classification=classify(content_of(previous), content) if previous else None,
        labels=selectors.labels_targeting(version),
        usage=version_usage(version=version),
        evidence_rows=version_evidence_rows(version),
        can_publish=actor.has_role(Role.PUBLISHER),
        can_move=actor.has_role(Role.PUBLISHER) and version.state != VersionState.REVOKED,
        can_revoke=actor.has_role(Role.OPS) and version.state != VersionState.REVOKED,
        skills_panel=version_skills_panel(version_id=version.pk, content=content),
        provider=_provider_section(request, version, content),
        approvals_panel=approvals_panel(actor, version),
        mcp_drifts=selectors.mcp_drifts_open(version.pk),
    )


def _json_param(request: HttpRequest, name: str, default: str) -> tuple[str, object]:
    """A JSON object typed into the page (at most MAX_PREVIEW_JSON characters): (text, value)."""
    raw = request.GET.get(name, default)
    if len(raw) > MAX_PREVIEW_JSON:
        raise InvalidContent("Too long.", {name: [f"At most {MAX_PREVIEW_JSON} characters."]})
    try:
        return raw, json.loads(raw) if raw.strip() else None
    except ValueError as exc:
        raise InvalidContent("Not JSON.", {name: [str(exc)]}) from None


def _provider_section(request: HttpRequest, version: BundleVersion, content: dict[str, Any]) -> dict[str, Any]:
    """The provider request section: the form, and the body for the format chosen (?format=)."""
    example = json.dumps(example_variables(content.get("variables") or {}), indent=2, ensure_ascii=False)
    fmt = request.GET.get("format", "")
    section: dict[str, Any] = {
        "formats": providers.FORMATS,
        "format": fmt,
        "variables": request.GET.get("variables", example),
        "turn_variables": request.GET.get("turn_variables", "{}"),
        "message": request.GET.get("message", "Hello."),
        "preview": None,
        "error": None,
    }
    if not fmt:
        return section
    try:
        _, session_values = _json_param(request, "variables", example)
        _, turn_values = _json_param(request, "turn_variables", "{}")
        section["preview"] = provider_preview(
            version=version,
            fmt=fmt,
            session_variables=session_values or {},
            turn_variables=turn_values,
            message=section["message"],
        )
    except InvalidContent as exc:
        details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.details.items())
        section["error"] = f"{exc.message} {details}".strip()
    return section


def version_revoke(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    """Take a version out of service (ops): the impact first (the sessions that will get 410
    version_revoked, the labels that still point at it), then the reason, then
    registry.services.version_revoke, the same service as POST .../revoke/ in the API."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    version = version_of(bundle, number)
    status = 200
    if request.method == "POST":
        form = RevokeForm(request.POST)
        if form.is_valid():
            try:
                registry_services.version_revoke(version=version, actor=actor, reason=form.cleaned_data["reason"])
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(
                    request,
                    f"Revoked v{version.number} of {bundle.name}: its sessions get 410 version_revoked "
                    "from their next call.",
                )
                return HttpResponseRedirect(url("adminui_version", bundle.name, version.number))
    else:
        need_role(actor, Role.OPS, "Revoking a version")
        if version.state == VersionState.REVOKED:
            raise NotFound(f"v{version.number} is revoked already.")
        form = RevokeForm()
    impact = version_revoke_preview(version=version)
    return render(
        request,
        model_admin,
        "adminui/version_revoke.html",
        f"Revoke {bundle.name} v{version.number}",
        status=status,
        crumb=f"Revoke v{version.number}",
        bundle=bundle,
        version=version,
        form=form,
        labels=impact.labels,
        sessions=impact.active_sessions,
    )


def version_diff(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    need_view(request, model_admin)
    bundle = bundle_of(name)
    new: BundleVersion | None
    if request.GET.get("new"):
        new = version_of(bundle, request.GET["new"])
    else:
        new = selectors.version_latest(bundle)
        if new is None:
            raise NotFound(f"Bundle {bundle.name!r} has no versions yet.")
    old = (
        version_of(bundle, request.GET["old"])
        if request.GET.get("old")
        else selectors.version_before(bundle, new.number)
    )
    old_content = content_of(old) if old else {"system_prompt": ""}
    new_content = content_of(new)
    return render(
        request,
        model_admin,
        "adminui/version_diff.html",
        f"{bundle.name}: v{old.number if old else '—'} → v{new.number}",
        bundle=bundle,
        old=old,
        new=new,
        diff=content_diff(old_content, new_content),
        classification=classify(old_content, new_content) if old else None,
        version_choices=version_choices(bundle, exclude_revoked=False),
    )
