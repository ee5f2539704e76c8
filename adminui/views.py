"""The admin pages for prompt engineers and ops, mounted by the ModelAdmins' get_urls().

Reads use the registry's selectors and plain queries; every write calls the same service
the REST API calls (bundle_create, version_publish, label_move, label_rollback,
session_end) with the Actor of the signed-in person, so roles, reasons, protected labels,
immutability and locking hold identically. The pages only decide what to *offer*; a
forged request reaches the service, which refuses it."""

import json
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC
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
from adminui.diffing import content_diff, pretty
from adminui.forms import (
    JSON_FIELDS,
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
from adminui.moves import classify, movable_labels
from core.errors import Conflict, DomainError, Forbidden, InvalidContent, NotFound
from registry import services as registry_services
from registry.lifecycle import (
    label_is_protected,
    label_move_preview,
    may_move,
    version_publish_check,
    version_revoke_preview,
)
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.selectors import bundle_get, versions_of
from sessions_app import services as sessions_services
from sessions_app.models import Session, SessionStatus
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
        .annotate(active_sessions=Count("sessions", filter=Q(sessions__status=SessionStatus.ACTIVE)))
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
    labels: dict[int, list[str]] = defaultdict(list)
    ids = [v.pk for v in page_obj]
    for version_id, label in (
        Label.objects.filter(version_id__in=ids).order_by("name").values_list("version_id", "name")
    ):
        labels[version_id].append(label)
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
    return _render(request, model_admin, "adminui/label_list.html", "Labels", labels=list(labels), q=q)


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
        labels_by_version[label.version_id].append(label.name)
    label_rows = [
        {
            "label": label,
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
    if request.method == "POST":
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
    labels = list(Label.objects.filter(version=version).order_by("name"))
    return _render(
        request,
        model_admin,
        "adminui/version_detail.html",
        f"{bundle.name} v{version.number}",
        crumb=f"v{version.number}",
        bundle=bundle,
        version=version,
        content=content,
        json_fields=[
            (key, pretty(content.get(key)))
            for key in ("tools", "guardrails", "output_schema", "model", "metadata", "variables", "knowledge")
            if key in content or key not in ("variables", "knowledge")  # optional: shown when present
        ],
        previous=previous,
        changes=changes,
        classification=classify(content_of(previous), content) if previous else None,
        labels=labels,
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


def _label_number(bundle: Bundle, name: str) -> str:
    """The version number a label targets now, as the confirm page recorded it ("" for none)."""
    number = Label.objects.filter(bundle=bundle, name=name).values_list("version__number", flat=True).first()
    return "" if number is None else str(number)


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
) -> HttpResponse:
    """Step 2: what the move would do now, and what the label's compatibility policy makes of
    it (registry.lifecycle.label_move_preview; label_move applies the same rules when the move
    is confirmed)."""
    actor = actor_for_user(request.user)
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
        classification=check.diff,
        # The checkbox is offered to whoever may make this move: for a protected label, ops.
        can_allow_breaking=preview.allowed,
        rollback=rollback,
        refusal=refusal.message if refusal else "",
        refused_changes=_changes_in_words(refusal.details.get("changes")) if refusal else [],
        # The confirm was for another state of the label: show the new consequence first.
        stale=refusal is None and request.POST.get("confirm") == "yes",
        hidden=hidden,
        expected_from=_label_number(bundle, label_name),
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


def label_move(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Step 1 (form) -> step 2 (confirmation stating the consequence) -> the move."""
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    offered = movable_labels(actor, bundle)
    choices = [(label.name, f"{label.name} (compatibility: {label.compatibility})") for label in offered]
    versions = _version_choices(bundle)
    if request.method != "POST":
        _need_role(actor, Role.PUBLISHER, "Moving a label")
        initial = {"label": request.GET.get("label", ""), "version": request.GET.get("version", "")}
        if initial["label"] and initial["label"] not in {label.name for label in offered}:
            raise PermissionDenied(f"You may not move the label {initial['label']!r}: it is protected (Ops only).")
        form = MoveForm(initial=initial, labels=choices, versions=versions)
        return _move_form(request, model_admin, bundle, form)

    form = MoveForm(request.POST, labels=choices, versions=versions)
    if not form.is_valid():
        return _move_form(request, model_admin, bundle, form)
    label_name = form.cleaned_data["name"]
    target = _version(bundle, form.cleaned_data["version"])
    reason = form.cleaned_data["reason"]
    field = "label" if form.cleaned_data.get("label") else "new_label"

    def confirm_page(refusal: Conflict | None = None) -> HttpResponse:
        return _confirm_page(
            request,
            model_admin,
            bundle,
            label_name=label_name,
            target=target,
            title=f"Confirm: move {label_name} to v{target.number}",
            hidden=[(k, request.POST.get(k, "")) for k in ("label", "new_label", "version", "reason")],
            action=url("adminui_move", bundle.name),
            back=url("adminui_move", bundle.name, query=f"label={label_name}&version={target.number}"),
            reason=reason,
            refusal=refusal,
        )

    current = _label_number(bundle, label_name)
    if request.POST.get("confirm") != "yes" or request.POST.get("expected_from") != current:
        # Say at this first step what the confirm would be refused for: a protected label (an
        # existing one, or `production` typed as a new name) is for ops only.
        if not may_move(actor, protected=label_is_protected(bundle=bundle, name=label_name)):
            form.add_error(field, f"The label {label_name!r} is protected: only ops may move it.")
            return _move_form(request, model_admin, bundle, form, status=403)
        if current == str(target.number):
            form.add_error("version", f"{label_name} already targets v{target.number}: there is nothing to move.")
            return _move_form(request, model_admin, bundle, form)
        return confirm_page()
    try:
        label, created = registry_services.label_move(
            bundle=bundle,
            name=label_name,
            version=target,
            actor=actor,
            reason=reason,
            allow_breaking=_allow_breaking(request),
        )
    except Conflict as exc:
        if exc.details.get("changes"):
            return confirm_page(exc)  # a breaking move: the same page, with the refusal and the changes
        add_domain_error(form, exc, field_map={"label": field}, default="version")  # a revoked target, say
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
    if created:
        text = f"Created label {label.name}: it targets v{version.number}."
    elif label.previous_version_id:
        old = BundleVersion.objects.defer("canonical").get(pk=label.previous_version_id)
        sessions = Session.objects.active().pinned_to(old.pk).count()
        text += f" v{old.number} is {old.state}" + (
            f" with {sessions} active session{'s' if sessions != 1 else ''}." if sessions else "."
        )
    messages.success(request, text)


def label_rollback(request: HttpRequest, model_admin: ModelAdmin, name: str, label: str) -> HttpResponse:
    actor = _need_view(request, model_admin)
    bundle = _bundle(name)
    obj = Label.objects.filter(bundle=bundle, name=label).first()
    if obj is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {label!r}.")
    # Versions the label targeted before, newest move first; the service refuses any other.
    seen: list[int] = []
    for version_id in obj.history.order_by("-history_id").values_list("version_id", flat=True):
        if version_id != obj.version_id and version_id not in seen:
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
    current = _label_number(bundle, label)
    if current == str(target.number):
        # Never a confirm page saying "moves from v1 to v1" (and the service refuses it too).
        form.add_error("version", f"{label} already targets v{target.number}: there is nothing to roll back.")
        return form_page(form)
    if request.POST.get("confirm") != "yes" or request.POST.get("expected_from") != current:
        return _confirm_page(
            request,
            model_admin,
            bundle,
            label_name=label,
            target=target,
            title=f"Confirm: roll {label} back to v{target.number}",
            hidden=[(k, request.POST.get(k, "")) for k in ("version", "reason")],
            action=url("adminui_rollback", bundle.name, label),
            back=url("adminui_rollback", bundle.name, label),
            reason=reason,
            rollback=True,
        )
    try:
        moved = registry_services.label_rollback(
            bundle=bundle, name=label, to_version=target, actor=actor, reason=reason
        )
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


def _drain_data(bundle_name: str | None) -> list[dict[str, Any]]:
    versions = (
        BundleVersion.objects.exclude(state=VersionState.UNRELEASED)
        .select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=Count("sessions", filter=Q(sessions__status=SessionStatus.ACTIVE)))
        .order_by("bundle__name", "-number")
    )
    if bundle_name:
        versions = versions.filter(bundle__name=bundle_name)
    labels: dict[int, list[str]] = defaultdict(list)
    for version_id, label in Label.objects.order_by("name").values_list("version_id", "name"):
        labels[version_id].append(label)
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
