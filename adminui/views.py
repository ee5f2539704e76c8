"""The admin pages for prompt engineers and ops, mounted by the ModelAdmins' get_urls().

Reads use the registry's selectors and plain queries; every write calls the same service
the REST API calls (bundle_create, version_publish, label_move, label_rollback,
session_end) with the Actor of the signed-in person, so roles, reasons, protected labels,
immutability and locking hold identically. The pages only decide what to *offer*; a
forged request reaches the service, which refuses it."""

import json
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, timedelta
from functools import update_wrapper
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Max, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from access.actors import Actor, actor_for_user
from access.models import Role
from adminui.diffing import OTHER_FIELDS, content_diff, pretty
from adminui.forms import (
    JSON_FIELDS,
    SPLIT_ROWS,
    BundleCreateForm,
    BundleEditForm,
    MoveForm,
    RevokeForm,
    RollbackForm,
    SessionSearchForm,
    VersionForm,
    VersionSearchForm,
    add_domain_error,
    set_choices,
)
from adminui.moves import classify, movable_labels, suggested_labels
from adminui.selectors import label_targets
from adminui.tool_cards import HEADINGS, tool_cards
from adminui.workbench import check_against
from core.errors import Conflict, DomainError, Forbidden, InvalidContent, NotFound, PreconditionFailed
from metrics.selectors import version_usage
from registry import services as registry_services
from registry.canonical import DEFAULTS
from registry.lifecycle import (
    label_is_protected,
    label_move_preview,
    may_move,
    version_publish_check,
    version_revoke_preview,
)
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.releases import ReleaseMove, release_preview
from registry.selectors import bundle_get, label_targets_out, versions_of
from sessions_app import services as sessions_services
from sessions_app.models import Session, SessionStatus, active_sessions_annotation
from skills.selectors import version_skills_panel

View = Callable[..., HttpResponse]


# --- plumbing -------------------------------------------------------------------------------


def page(view: View, model_admin: ModelAdmin) -> View:
    """Bind a page to its ModelAdmin and show refusals and missing objects as admin pages
    (the project's handlers answer JSON, which suits the API, not a person)."""

    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, model_admin, *args, **kwargs)
        except (Http404, NotFound) as exc:
            return _error(request, model_admin, "Not found", _text(exc, "There is nothing at this address."), 404)
        except (PermissionDenied, Forbidden) as exc:
            return _error(request, model_admin, "Not allowed", _text(exc, "You may not open this page."), 403)

    return update_wrapper(inner, view)


def _text(exc: Exception, fallback: str) -> str:
    return getattr(exc, "message", None) or (str(exc.args[0]) if exc.args else fallback)


def _error(request: HttpRequest, model_admin: ModelAdmin, title: str, message: str, status: int) -> HttpResponse:
    return _render(request, model_admin, "adminui/error.html", title, status=status, message=message)


def _render(
    request: HttpRequest, model_admin: ModelAdmin, template: str, title: str, *, status: int = 200, **context: Any
) -> TemplateResponse:
    ctx = {
        **model_admin.admin_site.each_context(request),
        "is_nav_sidebar_enabled": False,  # the top navigation has these pages; the sidebar squeezed tables
        "opts": model_admin.model._meta,
        "title": title,
        "actor": actor_for_user(request.user),
        **context,
    }
    return TemplateResponse(request, template, ctx, status=status)


def _need_view(request: HttpRequest, model_admin: ModelAdmin) -> Actor:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied("Your account may not see these pages; ask an admin to add you to a group.")
    return actor_for_user(request.user)


def _need_role(actor: Actor, role: str, doing: str) -> None:
    """Refuse to *show* a form the person cannot use (a POST still goes to the service)."""
    if not actor.has_role(role):
        raise PermissionDenied(f"{doing} needs the {role} role; you have {actor.role}.")


def _bundle(name: str) -> Bundle:
    return bundle_get(name=name)  # NotFound becomes a 404 page


def _version(bundle: Bundle, number: Any) -> BundleVersion:
    try:
        number = int(number)
    except (TypeError, ValueError):
        raise NotFound(f"{number!r} is not a version number.") from None
    version = versions_of(bundle).filter(number=number).first()
    if version is None:
        raise NotFound(f"Bundle {bundle.name!r} has no version {number}.")
    return version


def content_of(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(version.canonical))


def url(name: str, *args: Any, query: str = "") -> str:
    return reverse(f"admin:{name}", args=args) + (f"?{query}" if query else "")


def _version_choices(bundle: Bundle, *, exclude_revoked: bool = True) -> list[tuple[int, str]]:
    versions = BundleVersion.objects.filter(bundle=bundle).defer("canonical").order_by("-number")
    if exclude_revoked:
        versions = versions.exclude(state=VersionState.REVOKED)
    return [(v.number, _version_label(v)) for v in versions]


def _version_label(v: BundleVersion) -> str:
    message = v.message.splitlines()[0] if v.message else ""
    if len(message) > 60:
        message = message[:59] + "…"
    return f"v{v.number} ({v.state}) {message}"


# --- label targets (a label is one version, or a split of several with weights) ----------------


def split_text(targets: list[dict[str, int]]) -> str:
    """`v3` for a single target, `v3 90% · v4 10%` for a split (registry.selectors.label_targets_out)."""
    if len(targets) == 1 and targets[0]["weight"] == 100:
        return f"v{targets[0]['version']}"
    return " · ".join(f"v{t['version']} {t['weight']}%" for t in targets)


def _active_by_version(version_ids: set[int]) -> dict[int, int]:
    # order_by(): the default ordering would otherwise join the GROUP BY. The partial index of
    # active sessions serves it; revoked versions count 0 (their sessions only get 410).
    rows = (
        Session.objects.active()
        .filter(version_id__in=version_ids)
        .exclude(version__state=VersionState.REVOKED)
        .order_by()
        .values_list("version_id")
    )
    return dict(rows.annotate(n=Count("id")))


def _labels_by_version(labels: Any) -> dict[int, list[str]]:
    """Label names per version id, a split label under each of its targets (weight 0 too)."""
    out: dict[int, list[str]] = defaultdict(list)
    for version_id, name, targets in labels.order_by("name").values_list("version_id", "name", "targets"):
        for vid in sorted({t["version_id"] for t in targets} | {version_id}):
            out[vid].append(name)
    return out


def _label_state_text(label: Label) -> str:
    """What a label is now, for the person whose confirm was for an older state of it."""
    return (
        f"{label.name} now targets {split_text(label_targets_out(label))} (revision {label.revision}, "
        f"changed {_when(label.updated_at)} UTC by {label.updated_by})"
    )


# --- bundles --------------------------------------------------------------------------------


def bundle_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = _need_view(request, model_admin)
    q = request.GET.get("q", "").strip()
    bundles_qs = Bundle.objects.annotate(latest=Max("versions__number")).order_by("name")
    if q:
        bundles_qs = bundles_qs.filter(Q(name__icontains=q) | Q(description__icontains=q) | Q(when_to_use__icontains=q))
    bundles = list(bundles_qs)
    labels_by_bundle: dict[int, list[Label]] = defaultdict(list)
    for label in Label.objects.select_related("version").defer("version__canonical").order_by("name"):
        labels_by_bundle[label.bundle_id].append(label)
    # order_by(): the default ordering would otherwise join the GROUP BY.
    active = dict(Session.objects.active().order_by().values_list("bundle_id").annotate(n=Count("id")))
    rows = [
        {"bundle": b, "labels": labels_by_bundle[b.pk], "latest": b.latest, "active": active.get(b.pk, 0)}
        for b in bundles
    ]
    return _render(
        request,
        model_admin,
        "adminui/bundle_list.html",
        "Bundles",
        rows=rows,
        q=q,
        can_create=actor.has_role(Role.PUBLISHER),
    )


def version_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Every version of every bundle, searchable (replaces the stock list, whose "40@1" and US
    dates said little): by bundle, message, author, a content-hash prefix or `bundle@n`."""
    _need_view(request, model_admin)
    form = VersionSearchForm(
        request.GET or None,
        bundles=list(Bundle.objects.order_by("name").values_list("name", flat=True)),
        states=list(VersionState.choices),
    )
    versions = (
        BundleVersion.objects.select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=active_sessions_annotation())
        .order_by("bundle__name", "-number")
    )
    if form.is_valid():
        data = form.cleaned_data
        if data["bundle"]:
            versions = versions.filter(bundle__name=data["bundle"])
        if data["state"]:
            versions = versions.filter(state=data["state"])
        if q := data["q"].strip():
            match = Q(bundle__name__icontains=q) | Q(message__icontains=q) | Q(author__icontains=q)
            if len(q) >= 6 and all(c in "0123456789abcdef" for c in q.lower()):
                match |= Q(content_hash__startswith=q.lower())
            name, at, number = q.rpartition("@")
            if at and number.isdigit():
                match |= Q(bundle__name=name, number=int(number))
            versions = versions.filter(match)
    page_obj = Paginator(versions, 50).get_page(request.GET.get("page"))
    ids = [v.pk for v in page_obj]
    labels = _labels_by_version(Label.objects.filter(Q(version_id__in=ids) | ~Q(targets=[])))
    query = request.GET.copy()
    query.pop("page", None)
    return _render(
        request,
        model_admin,
        "adminui/version_list.html",
        "Versions",
        form=form,
        page_obj=page_obj,
        rows=[{"version": v, "labels": labels.get(v.pk, [])} for v in page_obj],
        query=query.urlencode(),
    )


def label_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Every label of every bundle as `production → v2` with its target's state (replaces the
    stock list, which showed the target as "2@1")."""
    _need_view(request, model_admin)
    q = request.GET.get("q", "").strip()
    labels = (
        Label.objects.select_related("bundle", "version").defer("version__canonical").order_by("bundle__name", "name")
    )
    if q:
        labels = labels.filter(Q(bundle__name__icontains=q) | Q(name__icontains=q))
    labels_list = list(labels)
    targets = label_targets(labels_list)
    rows = [{"label": label, "targets": targets[label.pk]} for label in labels_list]
    return _render(request, model_admin, "adminui/label_list.html", "Labels", rows=rows, q=q)


def bundle_add(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = _need_view(request, model_admin)
    status = 200
    if request.method == "POST":
        form = BundleCreateForm(request.POST)
        if form.is_valid():
            try:
                bundle = registry_services.bundle_create(actor=actor, **form.cleaned_data)
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Bundle {bundle.name} created. Write its first version below.")
                return HttpResponseRedirect(url("adminui_version_new", bundle.name))
    else:
        _need_role(actor, Role.PUBLISHER, "Creating a bundle")
        form = BundleCreateForm()
    return _render(request, model_admin, "adminui/bundle_add.html", "Create a bundle", status=status, form=form)


def bundle_edit(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Edit what a bundle says about itself (description, when_to_use); through bundle_update."""
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    status = 200
    if request.method == "POST":
        form = BundleEditForm(request.POST)
        if form.is_valid():
            try:
                registry_services.bundle_update(bundle=bundle, actor=actor, **form.cleaned_data)
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Bundle {bundle.name} updated.")
                return HttpResponseRedirect(url("adminui_bundle", bundle.name))
    else:
        _need_role(actor, Role.PUBLISHER, "Editing a bundle")
        form = BundleEditForm(initial={"description": bundle.description, "when_to_use": bundle.when_to_use})
    return _render(
        request,
        model_admin,
        "adminui/bundle_add.html",
        f"Edit {bundle.name}",
        status=status,
        form=form,
        submit="Save",
    )


def bundle_overview(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    labels = list(Label.objects.filter(bundle=bundle).select_related("version").defer("version__canonical"))
    versions = list(versions_of(bundle).defer("canonical").order_by("-number"))
    labels_by_version: dict[int, list[str]] = defaultdict(list)
    for label in labels:
        for version_id in {t["version_id"] for t in label.targets} | {label.version_id}:
            labels_by_version[version_id].append(label.name)
    targets = label_targets(labels)
    label_rows = [
        {
            "label": label,
            "targets": targets[label.pk],
            "can_move": may_move(actor, protected=label.protected),
            "can_rollback": actor.has_role(Role.OPS) and label.previous_version_id is not None,
        }
        for label in labels
    ]
    version_rows = [{"version": v, "labels": labels_by_version.get(v.pk, [])} for v in versions]
    return _render(
        request,
        model_admin,
        "adminui/bundle_overview.html",
        f"Bundle {bundle.name}",
        bundle=bundle,
        label_rows=label_rows,
        version_rows=version_rows,
        can_publish=actor.has_role(Role.PUBLISHER),
    )


# --- versions -------------------------------------------------------------------------------


def version_new(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    latest = BundleVersion.objects.filter(bundle=bundle).order_by("-number").first()
    source = _version(bundle, request.GET["from"]) if request.GET.get("from") else latest
    status = 200
    identical = None
    verdict = None
    if request.method == "POST" and "check" in request.POST:
        # "Check against vN": the verdict without publishing; a missing message does not stop it.
        form = VersionForm(request.POST)
        form.is_valid()
        if set(form.errors) <= {"message"}:
            form.errors.pop("message", None)
            try:
                verdict = check_against(
                    bundle=bundle,
                    content=form.content(),
                    against=source,
                    message=form.cleaned_data.get("route_message") or "",
                )
            except DomainError as exc:
                add_domain_error(form, exc)
        else:
            _precheck(form, bundle)
    elif request.method == "POST":
        form = VersionForm(request.POST)
        if form.is_valid():
            try:
                result = registry_services.version_publish(
                    bundle=bundle, content=form.content(), message=form.cleaned_data["message"], actor=actor
                )
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                if not result.created:
                    identical = result.version  # say so, and keep what was typed
                else:
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
                    return HttpResponseRedirect(url("adminui_version", bundle.name, version.number))
        else:
            _precheck(form, bundle)
    else:
        _need_role(actor, Role.PUBLISHER, "Writing a version")
        initial = VersionForm.initial_from(content_of(source) if source else {"system_prompt": ""})
        form = VersionForm(initial=initial)
    return _render(
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
        version_choices=_version_choices(bundle, exclude_revoked=False),
    )


def _precheck(form: VersionForm, bundle: Bundle) -> None:
    """When the form has errors (bad JSON, no message), show the content's own problems with
    them, all at once: registry.lifecycle.version_publish_check (what version_publish would
    say) on the fields that did parse; its contract findings only when every JSON field parsed."""
    try:
        check = version_publish_check(bundle=bundle, content=form.content())
    except InvalidContent as exc:
        add_domain_error(form, exc)
        return
    if any(name in form.errors for name in JSON_FIELDS):
        return  # a field that did not parse would be checked as empty: its errors would mislead
    if check.errors:
        add_domain_error(form, InvalidContent("The bundle contradicts itself.", check.errors))


def version_detail(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    version = _version(bundle, number)
    content = content_of(version)
    previous = BundleVersion.objects.filter(bundle=bundle, number__lt=version.number).order_by("-number").first()
    changes = content_diff(content_of(previous), content) if previous else None
    # Labels that target it alone or as one target of a split (weight 0 included).
    labels = list(Label.objects.targeting(version.pk).order_by("name"))
    return _render(
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
        changes=changes,
        classification=classify(content_of(previous), content) if previous else None,
        labels=labels,
        usage=version_usage(version=version),
        can_publish=actor.has_role(Role.PUBLISHER),
        can_move=actor.has_role(Role.PUBLISHER) and version.state != VersionState.REVOKED,
        can_revoke=actor.has_role(Role.OPS) and version.state != VersionState.REVOKED,
        skills_panel=version_skills_panel(version_id=version.pk, content=content),
    )


def version_revoke(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    """Take a version out of service (ops): the impact first (the sessions that will get 410
    version_revoked, the labels that still point at it), then the reason, then
    registry.services.version_revoke, the same service as POST .../revoke/ in the API."""
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    version = _version(bundle, number)
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
        _need_role(actor, Role.OPS, "Revoking a version")
        if version.state == VersionState.REVOKED:
            raise NotFound(f"v{version.number} is revoked already.")
        form = RevokeForm()
    impact = version_revoke_preview(version=version)
    return _render(
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
    _need_view(request, model_admin)
    bundle = _bundle(name)
    new: BundleVersion | None
    if request.GET.get("new"):
        new = _version(bundle, request.GET["new"])
    else:
        new = BundleVersion.objects.filter(bundle=bundle).order_by("-number").first()
        if new is None:
            raise NotFound(f"Bundle {bundle.name!r} has no versions yet.")
    old: BundleVersion | None
    if request.GET.get("old"):
        old = _version(bundle, request.GET["old"])
    else:
        old = BundleVersion.objects.filter(bundle=bundle, number__lt=new.number).order_by("-number").first()
    old_content = content_of(old) if old else {"system_prompt": ""}
    new_content = content_of(new)
    return _render(
        request,
        model_admin,
        "adminui/version_diff.html",
        f"{bundle.name}: v{old.number if old else '—'} → v{new.number}",
        bundle=bundle,
        old=old,
        new=new,
        diff=content_diff(old_content, new_content),
        classification=classify(old_content, new_content) if old else None,
        version_choices=_version_choices(bundle, exclude_revoked=False),
    )


# --- labels ---------------------------------------------------------------------------------


def _label_now(bundle: Bundle, name: str) -> Label | None:
    return Label.objects.select_related("version").defer("version__canonical").filter(bundle=bundle, name=name).first()


def _expected_revision(request: HttpRequest) -> int | None:
    """The label's revision the confirm page was computed from (sent as If-Match to the
    service); None: the page was for a label that did not exist yet."""
    try:
        return int(request.POST.get("expected_revision", ""))
    except ValueError:
        return None


def _stale_text(bundle: Bundle, name: str) -> str:
    label = _label_now(bundle, name)
    now = _label_state_text(label) if label else f"{name} no longer exists"
    return (
        f"The label moved since you reviewed it: {now}. Nothing has moved yet: here is what your change "
        "would do now. Decide again."
    )


def _allow_breaking(request: HttpRequest) -> bool:
    return request.POST.get("allow_breaking") in ("yes", "on", "true", "1")


def _confirm_page(
    request: HttpRequest,
    model_admin: ModelAdmin,
    bundle: Bundle,
    *,
    label_name: str,
    target: BundleVersion,
    title: str,
    hidden: list[tuple[str, str]],
    action: str,
    back: str,
    reason: str,
    rollback: bool = False,
    refusal: Conflict | None = None,
    stale: str = "",
) -> HttpResponse:
    """Step 2 for a label with one target: what the move would do now, and what the label's
    compatibility policy makes of it (registry.lifecycle.label_move_preview; label_move applies
    the same rules when the move is confirmed). The label's revision is read before the
    preview and sent back as If-Match, so a confirm never applies to a state it did not show."""
    actor = actor_for_user(request.user)
    label = _label_now(bundle, label_name)
    preview = label_move_preview(bundle=bundle, label_name=label_name, target=target, actor=actor)
    consequence, check = preview.consequence, preview.check
    return _render(
        request,
        model_admin,
        "adminui/move_confirm.html",
        title,
        status=refusal.status if refusal else 200,
        bundle=bundle,
        consequence=consequence,
        check=check,
        checks_list=[preview.checks.out()] if preview.checks and preview.checks.required else [],
        classification=check.diff,
        # The checkbox is offered to whoever may make this move: for a protected label, ops.
        can_allow_breaking=preview.allowed,
        rollback=rollback,
        refusal=refusal.message if refusal else "",
        refused_changes=_changes_in_words(refusal.details.get("changes")) if refusal else [],
        stale=stale,
        hidden=hidden,
        expected_revision=label.revision if label else "",
        action=action,
        back=back,
        reason=reason,
    )


def _split_confirm_page(
    request: HttpRequest,
    model_admin: ModelAdmin,
    bundle: Bundle,
    *,
    label_name: str,
    targets: list[tuple[BundleVersion, int]],
    title: str,
    hidden: list[tuple[str, str]],
    action: str,
    back: str,
    reason: str,
    rollback: bool = False,
    refusal: Conflict | None = None,
    stale: str = "",
) -> HttpResponse:
    """Step 2 when the label is or becomes a split: registry.releases.release_preview of this
    one move (what becomes live with which weight, what leaves every target and starts
    draining, the compatibility verdict per new target), with the active sessions pinned to
    each version. Raises InvalidContent for a split the service would refuse."""
    actor = actor_for_user(request.user)
    label = _label_now(bundle, label_name)
    if label is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {label_name!r}.")
    impact = release_preview(moves=[ReleaseMove(bundle, label_name, targets)], actor=actor)[0]
    before = impact["current"]["targets"]
    after = impact["becomes_live"]
    numbers = {t["version"] for t in before} | {t["version"] for t in after}
    versions = {v.number: v for v in BundleVersion.objects.filter(bundle=bundle, number__in=numbers).defer("canonical")}
    active = _active_by_version({v.pk for v in versions.values()})
    checks = {c["version"]: c for c in impact["compatibility"]}
    was = {t["version"] for t in before}
    rows = [
        {
            "number": t["version"],
            "weight": t["weight"],
            "state": versions[t["version"]].state,
            "active": active.get(versions[t["version"]].pk, 0),
            "new": t["version"] not in was,
            "check": checks.get(t["version"]),
        }
        for t in after
    ]
    leaving = [{**row, "active": row["active_sessions"]} for row in impact["leaving"]]
    needs_override = any(c["needs_allow_breaking"] for c in impact["compatibility"])
    return _render(
        request,
        model_admin,
        "adminui/move_split_confirm.html",
        title,
        status=refusal.status if refusal else 200,
        bundle=bundle,
        label=label,
        current=split_text(before),
        current_primary=impact["current"]["version"],
        becomes=split_text(after),
        rows=rows,
        leaving=leaving,
        backward=label.compatibility == "backward",
        needs_override=needs_override,
        any_check=bool(checks),
        required_checks=impact["checks"],
        can_allow_breaking=needs_override and impact["allowed"],
        refusal=refusal.message if refusal else "",
        refused_changes=_changes_in_words(refusal.details.get("changes")) if refusal else [],
        stale=stale,
        rollback=rollback,
        hidden=hidden,
        expected_revision=label.revision,
        action=action,
        back=back,
        reason=reason,
    )


def _changes_in_words(changes: Any) -> list[dict[str, str]]:
    """The breaking changes of a refused move (the Conflict's details), as the page lists them."""
    if not isinstance(changes, list):
        return []
    return [
        {"level": str(c.get("level", "")), "message": str(c.get("message", "")), "path": str(c.get("path", ""))}
        for c in changes
        if isinstance(c, dict)
    ]


def _split_errors(form: MoveForm, exc: InvalidContent, rows: list[tuple[int, int, int]]) -> None:
    """The service's verdict on a split, next to the row it names or above the rows."""
    weight_fields = {f"targets[{i}].weight": f"split_weight_{row}" for i, (row, _, _) in enumerate(rows)}
    total = sum(weight for _, _, weight in rows)
    for path, found in (exc.details or {"targets": [exc.message]}).items():
        for message in found if isinstance(found, list) else [found]:
            if path in weight_fields:
                form.add_error(weight_fields[path], str(message))
            elif "sum" in str(message) and rows:
                form.add_error("targets", f"{message} These add up to {total}.")
            else:
                form.add_error("targets" if path == "targets" else None, str(message))


def label_move(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Step 1 (form: one version or a split) -> step 2 (confirmation stating the consequence,
    carrying the label's revision) -> the move, If-Match on that revision."""
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    offered = movable_labels(actor, bundle)
    suggested = suggested_labels(actor, bundle)
    choices = [(label.name, f"{label.name} (compatibility: {label.compatibility})") for label in offered] + suggested
    versions = _version_choices(bundle)
    if request.method != "POST":
        _need_role(actor, Role.PUBLISHER, "Moving a label")
        initial: dict[str, Any] = {"label": request.GET.get("label", ""), "version": request.GET.get("version", "")}
        chosen = next((label for label in offered if label.name == initial["label"]), None)
        if initial["label"] and chosen is None and initial["label"] not in dict(suggested):
            raise PermissionDenied(f"You may not move the label {initial['label']!r}: it is protected (Ops only).")
        if chosen is not None and chosen.targets and not initial["version"]:
            # A split label: start from its weights (a ramp is usually a change of them).
            for row, t in enumerate(chosen.targets[:SPLIT_ROWS], 1):
                initial[f"split_version_{row}"], initial[f"split_weight_{row}"] = t["number"], t["weight"]
        form = MoveForm(initial=initial, labels=choices, versions=versions)
        return _move_form(request, model_admin, bundle, form)

    form = MoveForm(request.POST, labels=choices, versions=versions)
    if not form.is_valid():
        return _move_form(request, model_admin, bundle, form)
    label_name = form.cleaned_data["name"]
    reason = form.cleaned_data["reason"]
    field = "label" if form.cleaned_data.get("label") else "new_label"
    rows: list[tuple[int, int, int]] = form.cleaned_data["split"]
    single: BundleVersion | None = None
    if rows:
        targets = [(_version(bundle, number), weight) for _, number, weight in rows]
    else:
        single = _version(bundle, form.cleaned_data["version"])
        targets = [(single, 100)]
    hidden = [(k, request.POST.get(k, "")) for k in form.fields if k != "targets"]

    def confirm_page(refusal: Conflict | None = None, stale: str = "") -> HttpResponse:
        now = _label_now(bundle, label_name)
        if single is not None and (now is None or not now.targets):
            return _confirm_page(
                request,
                model_admin,
                bundle,
                label_name=label_name,
                target=single,
                title=f"Confirm: move {label_name} to v{single.number}",
                hidden=hidden,
                action=url("adminui_move", bundle.name),
                back=url("adminui_move", bundle.name, query=f"label={label_name}&version={single.number}"),
                reason=reason,
                refusal=refusal,
                stale=stale,
            )
        return _split_confirm_page(
            request,
            model_admin,
            bundle,
            label_name=label_name,
            targets=targets,
            title=f"Confirm: {label_name} → {split_text([{'version': v.number, 'weight': w} for v, w in targets])}",
            hidden=hidden,
            action=url("adminui_move", bundle.name),
            back=url("adminui_move", bundle.name, query=f"label={label_name}"),
            reason=reason,
            refusal=refusal,
            stale=stale,
        )

    existing = _label_now(bundle, label_name)
    if request.POST.get("confirm") != "yes":
        # Say at this first step what the confirm would be refused for: a protected label (an
        # existing one, or `production` typed as a new name) is for ops only.
        if not may_move(actor, protected=label_is_protected(bundle=bundle, name=label_name)):
            form.add_error(field, f"The label {label_name!r} is protected: only ops may move it.")
            return _move_form(request, model_admin, bundle, form, status=403)
        if rows and existing is None:
            form.add_error("targets", f"A split moves an existing label: create {label_name} at one version first.")
            return _move_form(request, model_admin, bundle, form)
        wanted = sorted((v.number, w) for v, w in targets)
        if existing is not None and sorted((t["version"], t["weight"]) for t in label_targets_out(existing)) == wanted:
            form.add_error(
                "version" if single else "targets",
                f"{label_name} already targets {split_text(label_targets_out(existing))}: there is nothing to move.",
            )
            return _move_form(request, model_admin, bundle, form)
        try:
            return confirm_page()
        except InvalidContent as exc:
            _split_errors(form, exc, rows)
            return _move_form(request, model_admin, bundle, form, status=exc.status)
    expected = _expected_revision(request)
    if expected is None and existing is not None:
        return confirm_page(stale=_stale_text(bundle, label_name))  # reviewed as new; created since
    try:
        label, created = registry_services.label_move(
            bundle=bundle,
            name=label_name,
            version=single,
            targets=None if single else targets,
            actor=actor,
            reason=reason,
            allow_breaking=_allow_breaking(request),
            expected_revision=expected,
        )
    except PreconditionFailed:
        return confirm_page(stale=_stale_text(bundle, label_name))
    except Conflict as exc:
        if exc.details.get("changes"):
            return confirm_page(exc)  # a breaking move: the same page, with the refusal and the changes
        add_domain_error(form, exc, field_map={"label": field}, default="version")  # a revoked target, say
        return _move_form(request, model_admin, bundle, form, status=exc.status)
    except InvalidContent as exc:
        if rows:
            _split_errors(form, exc, rows)
        else:
            add_domain_error(form, exc, field_map={"label": field}, default="version")
        return _move_form(request, model_admin, bundle, form, status=exc.status)
    except DomainError as exc:
        # Forbidden is about the label; anything else about the version.
        add_domain_error(
            form, exc, field_map={"label": field}, default=field if isinstance(exc, Forbidden) else "version"
        )
        return _move_form(request, model_admin, bundle, form, status=exc.status)
    _report_move(request, label, created)
    return HttpResponseRedirect(url("adminui_bundle", bundle.name))


def _move_form(
    request: HttpRequest, model_admin: ModelAdmin, bundle: Bundle, form: MoveForm, *, status: int = 200
) -> HttpResponse:
    actor = actor_for_user(request.user)
    protected = list(Label.objects.filter(bundle=bundle, protected=True).values_list("name", flat=True))
    return _render(
        request,
        model_admin,
        "adminui/move_form.html",
        f"Move a label of {bundle.name}",
        status=status,
        bundle=bundle,
        form=form,
        hidden_protected=[n for n in protected if not may_move(actor, protected=True)],
    )


def _report_move(request: HttpRequest, label: Label, created: bool) -> None:
    version = BundleVersion.objects.defer("canonical").get(pk=label.version_id)
    text = f"Moved {label.name}: it now targets v{version.number}."
    if label.targets:
        text = f"Moved {label.name}: it now targets {split_text(label_targets_out(label))}."
    if created:
        text = f"Created label {label.name}: it targets v{version.number}."
    elif label.previous_version_id and not label.targets:
        old = BundleVersion.objects.defer("canonical").get(pk=label.previous_version_id)
        sessions = 0 if old.state == VersionState.REVOKED else Session.objects.active_on(old.pk)
        text += f" v{old.number} is {old.state}" + (
            f" with {sessions} active session{'s' if sessions != 1 else ''}." if sessions else "."
        )
    messages.success(request, text)


def label_rollback(request: HttpRequest, model_admin: ModelAdmin, name: str, label: str) -> HttpResponse:
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    obj = _label_now(bundle, label)
    if obj is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {label!r}.")
    # Versions the label targeted before, newest move first; the service refuses any other.
    seen: list[int] = []
    for version_id in obj.history.order_by("-history_id").values_list("version_id", flat=True):
        if (version_id != obj.version_id or obj.targets) and version_id not in seen:
            seen.append(version_id)
    by_id = {v.pk: v for v in BundleVersion.objects.filter(pk__in=seen).defer("canonical")}
    versions = [(by_id[i].number, _version_label(by_id[i])) for i in seen if i in by_id]
    previous = by_id.get(obj.previous_version_id) if obj.previous_version_id else None

    def form_page(form: RollbackForm, status: int = 200) -> HttpResponse:
        # Whatever the POST was validated against, the page offers only the versions this
        # label targeted before (never its current target): an error must not widen the list.
        set_choices(form, "version", versions)
        return _render(
            request,
            model_admin,
            "adminui/rollback_form.html",
            f"Roll back {label} of {bundle.name}",
            status=status,
            bundle=bundle,
            label=obj,
            targets=split_text(label_targets_out(obj)),
            form=form,
        )

    if request.method != "POST":
        _need_role(actor, Role.OPS, "Rolling back")
        if not versions:
            raise NotFound(f"{label} has never targeted another version: there is nothing to roll back to.")
        return form_page(RollbackForm(initial={"version": previous.number if previous else None}, versions=versions))

    # Forged posts may name any version; the service decides. Offer-list validation would hide that.
    form = RollbackForm(request.POST, versions=_version_choices(bundle, exclude_revoked=False))
    if not form.is_valid():
        return form_page(form)
    target = _version(bundle, form.cleaned_data["version"])
    reason = form.cleaned_data["reason"]
    if obj.version_id == target.pk and not obj.targets:
        # Never a confirm page saying "moves from v1 to v1" (and the service refuses it too).
        form.add_error("version", f"{label} already targets v{target.number}: there is nothing to roll back.")
        return form_page(form)

    def confirm_page(stale: str = "") -> HttpResponse:
        now = _label_now(bundle, label)
        page_for = _split_confirm_page if now is not None and now.targets else None
        common: dict[str, Any] = {
            "label_name": label,
            "title": f"Confirm: roll {label} back to v{target.number}",
            "hidden": [(k, request.POST.get(k, "")) for k in ("version", "reason")],
            "action": url("adminui_rollback", bundle.name, label),
            "back": url("adminui_rollback", bundle.name, label),
            "reason": reason,
            "rollback": True,
            "stale": stale,
        }
        if page_for is not None:
            return page_for(request, model_admin, bundle, targets=[(target, 100)], **common)
        return _confirm_page(request, model_admin, bundle, target=target, **common)

    expected = _expected_revision(request)
    if request.POST.get("confirm") != "yes" or expected is None:
        return confirm_page()
    try:
        moved = registry_services.label_rollback(
            bundle=bundle, name=label, to_version=target, actor=actor, reason=reason, expected_revision=expected
        )
    except PreconditionFailed:
        return confirm_page(stale=_stale_text(bundle, label))
    except DomainError as exc:
        add_domain_error(form, exc, field_map={"to_version": "version"})
        return form_page(form, status=exc.status)
    _report_move(request, moved, False)
    return HttpResponseRedirect(url("adminui_bundle", bundle.name))


def bundle_history(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    _need_view(request, model_admin)
    bundle = _bundle(name)
    moves = list(
        Label.history.filter(bundle_id=bundle.pk)
        .select_related("version", "previous_version")
        .defer("version__canonical", "previous_version__canonical")
        .order_by("-history_date", "-history_id")
    )
    # Each change with its targets before and after (`v3 90% · v4 10%`): "before" is the
    # label's previous history row, whatever changed it (a move, a rollback, a release).
    before: dict[int, str] = {}
    for move in sorted(moves, key=lambda m: m.history_id):
        move.targets_text = split_text(label_targets_out(move))
        move.before_text = before.get(move.id, "")
        before[move.id] = move.targets_text
    versions = list(versions_of(bundle).defer("canonical").order_by("-number"))
    return _render(
        request,
        model_admin,
        "adminui/history.html",
        f"History of {bundle.name}",
        bundle=bundle,
        moves=moves,
        versions=versions,
    )


# --- drain dashboard ------------------------------------------------------------------------


# How long a drained or revoked version stays on the drain dashboard. The page polls every 3 s:
# it must read what is in motion (live, draining, just finished), not every version ever released.
DRAIN_DASHBOARD_RECENT = timedelta(days=7)


def _drain_data(bundle_name: str | None) -> list[dict[str, Any]]:
    since = timezone.now() - DRAIN_DASHBOARD_RECENT
    versions = (
        BundleVersion.objects.filter(
            Q(state__in=[VersionState.LIVE, VersionState.DRAINING])
            | Q(state=VersionState.DRAINED, drained_at__gte=since)
            | Q(state=VersionState.REVOKED, revoked_at__gte=since)
        )
        .select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=active_sessions_annotation())
        .order_by("bundle__name", "-number")
    )
    if bundle_name:
        versions = versions.filter(bundle__name=bundle_name)
    labels = _labels_by_version(Label.objects.all())
    bundles: dict[str, list[dict[str, Any]]] = {}
    for v in versions:
        bundles.setdefault(v.bundle.name, []).append(
            {
                "number": v.number,
                "state": v.state,
                "labels": labels.get(v.pk, []),
                "active_sessions": v.active_sessions,
                "draining_since": v.draining_since.isoformat() if v.draining_since else None,
                "drained_at": v.drained_at.isoformat() if v.drained_at else None,
                "draining_since_text": _when(v.draining_since),
                "drained_at_text": _when(v.drained_at),
                "url": url("adminui_version", v.bundle.name, v.number),
                "sessions_url": url(
                    "sessions_app_session_changelist", query=f"bundle={v.bundle.name}&version={v.number}&status=active"
                ),
            }
        )
    return [{"bundle": name, "url": url("adminui_bundle", name), "versions": rows} for name, rows in bundles.items()]


def _when(at: Any) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else ""


def drain_dashboard(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    _need_view(request, model_admin)
    bundle_name = request.GET.get("bundle") or None
    return _render(
        request,
        model_admin,
        "adminui/drain.html",
        "Drain dashboard" + (f": {bundle_name}" if bundle_name else ""),
        data=_drain_data(bundle_name),
        bundle_name=bundle_name or "",
        json_url=url("adminui_drain_json", query=f"bundle={bundle_name}" if bundle_name else ""),
        now=timezone.now(),
    )


def drain_json(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    _need_view(request, model_admin)
    bundle_name = request.GET.get("bundle") or None
    return JsonResponse({"at": timezone.now().isoformat(), "bundles": _drain_data(bundle_name)})


# --- sessions -------------------------------------------------------------------------------


def session_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    _need_view(request, model_admin)
    form = SessionSearchForm(
        request.GET or None,
        bundles=list(Bundle.objects.order_by("name").values_list("name", flat=True)),
        statuses=list(SessionStatus.choices),
    )
    sessions = Session.objects.select_related("bundle", "version").defer("version__canonical").order_by("-started_at")
    if form.is_valid():
        data = form.cleaned_data
        if data["bundle"]:
            sessions = sessions.filter(bundle__name=data["bundle"])
        if data["version"]:
            sessions = sessions.filter(version__number=data["version"])
        if data["status"]:
            sessions = sessions.filter(status=data["status"])
        if data["q"]:
            q = data["q"].strip()
            match = Q(external_id__icontains=q)
            try:
                match |= Q(pk=UUID(q))
            except ValueError:
                pass
            sessions = sessions.filter(match)
    paginator = Paginator(sessions, 50)
    page_obj = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return _render(
        request,
        model_admin,
        "adminui/session_list.html",
        "Sessions",
        form=form,
        page_obj=page_obj,
        query=query.urlencode(),
    )


def _session(session_id: UUID) -> Session:
    session = (
        Session.objects.select_related("bundle", "version", "api_key")
        .defer("version__canonical")
        .filter(pk=session_id)
        .first()
    )
    if session is None:
        raise NotFound(f"No session {session_id}.")
    return session


def session_detail(request: HttpRequest, model_admin: ModelAdmin, session_id: UUID) -> HttpResponse:
    actor = _need_view(request, model_admin)
    session = _session(session_id)
    now = timezone.now()
    return _render(
        request,
        model_admin,
        "adminui/session_detail.html",
        f"Session {session.pk}",
        session=session,
        lease_left=(session.expires_at - now) if session.status == SessionStatus.ACTIVE else None,
        lease_lapsed=session.status == SessionStatus.ACTIVE and session.expires_at <= now,
        can_end=actor.has_role(Role.OPS) and session.status == SessionStatus.ACTIVE,
    )


@require_POST
def session_end(request: HttpRequest, model_admin: ModelAdmin, session_id: UUID) -> HttpResponse:
    actor = _need_view(request, model_admin)
    session = _session(session_id)
    session = sessions_services.session_end(session=session, actor=actor)  # Forbidden -> 403 page
    messages.success(request, f"Session {session.pk} is {session.status}.")
    return HttpResponseRedirect(url("adminui_session", session.pk))
