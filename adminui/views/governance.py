"""A label's policy (registry.services.label_policy_set, the service PATCH .../labels/{label}/
calls) and approving a version (registry.services.approval_record, the service POST
.../versions/{n}/approvals/ calls), from the admin."""

from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.actors import Actor
from access.models import Role
from adminui.forms import ApprovalForm, LabelPolicyForm, add_domain_error
from adminui.views.base import bundle_of, label_of, need_role, need_view, render, url, version_of
from adminui.views.moves import expected_revision
from core.errors import DomainError, PreconditionFailed
from registry import selectors as registry_selectors
from registry import services as registry_services
from registry.models import Bundle, BundleVersion, Label, VersionState

POLICY_FIELDS = ("protected", "compatibility", "required_checks", "required_approvals")


def label_policy(request: HttpRequest, model_admin: ModelAdmin, name: str, label: str) -> HttpResponse:
    """The label's policy as a form (ops); saving it is label_policy_set with If-Match on the
    revision the form showed."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    obj = label_of(bundle, label)
    if request.method != "POST":
        need_role(actor, Role.OPS, "Changing a label's policy")
        initial = {k: getattr(obj, k) for k in POLICY_FIELDS}
        initial["required_checks"] = ", ".join(obj.required_checks or [])
        return _policy_form(request, model_admin, bundle, obj, LabelPolicyForm(initial=initial), obj.revision)
    form = LabelPolicyForm(request.POST)
    revision = expected_revision(request)
    if not form.is_valid():
        return _policy_form(request, model_admin, bundle, obj, form, revision or obj.revision, status=400)
    try:
        registry_services.label_policy_set(
            bundle=bundle,
            name=label,
            changes={k: form.cleaned_data[k] for k in POLICY_FIELDS},
            actor=actor,
            reason=form.cleaned_data["reason"],
            expected_revision=revision,
        )
    except PreconditionFailed:
        form.add_error(None, f"{label} changed since you opened this page: it is shown as it is now; decide again.")
        return _policy_form(request, model_admin, bundle, label_of(bundle, label), form, None, status=412)
    except DomainError as exc:
        add_domain_error(form, exc)
        return _policy_form(request, model_admin, bundle, obj, form, revision or obj.revision, status=exc.status)
    messages.success(request, f"Saved the policy of {label}.")
    return HttpResponseRedirect(url("adminui_bundle", bundle.name))


def _policy_form(
    request: HttpRequest,
    model_admin: ModelAdmin,
    bundle: Bundle,
    label: Label,
    form: LabelPolicyForm,
    revision: int | None,
    *,
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        model_admin,
        "adminui/label_policy_form.html",
        f"Policy of {label.name} of {bundle.name}",
        status=status,
        bundle=bundle,
        label=label,
        form=form,
        expected_revision=label.revision if revision is None else revision,
    )


def approvals_panel(actor: Actor, version: BundleVersion) -> dict[str, Any]:
    """What the version page shows of its approvals, and whether it offers to approve."""
    approvals = list(registry_selectors.approvals_of(bundle_id=version.bundle_id, content_hash=version.content_hash))
    return {
        "approvals": approvals,
        "can_approve": actor.has_role(Role.PUBLISHER)
        and actor.name != version.author
        and version.state != VersionState.REVOKED
        and all(a.approver != actor.name for a in approvals),
        "is_author": actor.name == version.author,
        "form": ApprovalForm(),
    }


def version_approve(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    """POST only (the form is on the version page): approval_record decides who may."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    version = version_of(bundle, number)
    back = HttpResponseRedirect(url("adminui_version", bundle.name, number))
    if request.method != "POST":
        return back
    form = ApprovalForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not approved: " + "; ".join(str(e) for errors in form.errors.values() for e in errors))
        return back
    try:
        _, created = registry_services.approval_record(version=version, actor=actor, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, f"Not approved: {exc.message}")
        return back
    messages.success(request, f"Approved v{number}." if created else f"You had already approved v{number}.")
    return back
