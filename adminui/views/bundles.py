"""Bundle pages: the list, create, edit, the overview (labels and versions) and the history of
its labels. Writes go to registry.services (bundle_create, bundle_update)."""

from collections import defaultdict

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.models import Role
from adminui import selectors
from adminui.forms import BundleCreateForm, BundleEditForm, add_domain_error
from adminui.views.base import bundle_of, need_role, need_view, render, split_text, url
from core.errors import DomainError
from registry import services as registry_services
from registry.lifecycle import may_move
from registry.selectors import label_targets_out


def bundle_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
    q = request.GET.get("q", "").strip()
    return render(
        request,
        model_admin,
        "adminui/bundle_list.html",
        "Bundles",
        rows=selectors.bundle_rows(q),
        q=q,
        can_create=actor.has_role(Role.PUBLISHER),
    )


def bundle_add(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
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
        need_role(actor, Role.PUBLISHER, "Creating a bundle")
        form = BundleCreateForm()
    return render(request, model_admin, "adminui/bundle_add.html", "Create a bundle", status=status, form=form)


def bundle_edit(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Edit what a bundle says about itself (description, when_to_use); through bundle_update."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    status = 200
    if request.method == "POST":
        need_role(actor, Role.PUBLISHER, "Editing a bundle")
        form = BundleEditForm(request.POST)
        if form.is_valid():
            fields = dict(form.cleaned_data)
            expected = fields.pop("etag")
            try:
                registry_services.bundle_update(bundle=bundle, actor=actor, expected_etag=expected, **fields)
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Bundle {bundle.name} updated.")
                return HttpResponseRedirect(url("adminui_bundle", bundle.name))
    else:
        need_role(actor, Role.PUBLISHER, "Editing a bundle")
        form = BundleEditForm(
            initial={
                "description": bundle.description,
                "when_to_use": bundle.when_to_use,
                "etag": registry_services.bundle_etag(bundle),
            }
        )
    return render(
        request,
        model_admin,
        "adminui/bundle_add.html",
        f"Edit {bundle.name}",
        status=status,
        form=form,
        submit="Save",
    )


def bundle_overview(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    labels = selectors.bundle_labels(bundle)
    versions = selectors.bundle_versions(bundle)
    labels_by_version: dict[int, list[str]] = defaultdict(list)
    for label in labels:
        for version_id in {t["version_id"] for t in label.targets} | {label.version_id}:
            labels_by_version[version_id].append(label.name)
    targets = selectors.label_targets(labels)
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
    return render(
        request,
        model_admin,
        "adminui/bundle_overview.html",
        f"Bundle {bundle.name}",
        bundle=bundle,
        label_rows=label_rows,
        version_rows=version_rows,
        can_publish=actor.has_role(Role.PUBLISHER),
        can_set_policy=actor.has_role(Role.OPS),
    )


def bundle_history(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    need_view(request, model_admin)
    bundle = bundle_of(name)
    moves = selectors.label_moves(bundle)
    # Each change with its targets before and after (`v3 90% · v4 10%`): "before" is the
    # label's previous history row, whatever changed it (a move, a rollback, a release).
    before: dict[int, str] = {}
    for move in sorted(moves, key=lambda m: m.history_id):
        move.targets_text = split_text(label_targets_out(move))
        move.before_text = before.get(move.id, "")
        before[move.id] = move.targets_text
    return render(
        request,
        model_admin,
        "adminui/history.html",
        f"History of {bundle.name}",
        bundle=bundle,
        moves=moves,
        versions=selectors.bundle_versions(bundle),
    )
