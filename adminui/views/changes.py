"""Pending change requests (registry.changes) in the admin: each with the impact preview of its
moves (registry.lifecycle.label_move_preview, the preview the move pages show) and approve and
reject forms that call change_approve and change_reject, the services the API calls."""

from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from adminui.forms import ApprovalForm
from adminui.views.base import need_view, render, url
from core.errors import DomainError
from registry import changes
from registry.lifecycle import label_move_preview


def change_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
    pending: list[dict[str, Any]] = []
    for change in changes.changes_visible(actor=actor, state="pending")[:50]:
        previews = []
        for bundle, label, targets in changes.change_moves(change):
            try:
                previews.append(label_move_preview(bundle=bundle, label_name=label, targets=targets, actor=actor))
            except DomainError:
                continue  # a version or bundle that is gone: the approval will say so
        pending.append(
            {
                "change": change,
                "previews": previews,
                "may_decide": actor.name != change.requester and actor.has_role(change.approver_role),
            }
        )
    return render(request, model_admin, "adminui/changes.html", "Pending changes", pending=pending, form=ApprovalForm())


def change_decide(request: HttpRequest, model_admin: ModelAdmin, change_id: str, verb: str) -> HttpResponse:
    """POST only: approve or reject a change with a reason."""
    actor = need_view(request, model_admin)
    back = HttpResponseRedirect(url("adminui_changes"))
    if request.method != "POST" or verb not in ("approve", "reject"):
        return back
    try:
        change = changes.change_get(change_id=change_id, actor=actor)
    except DomainError:
        raise Http404("No such change.") from None
    form = ApprovalForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not decided: give a reason.")
        return back
    decide = changes.change_approve if verb == "approve" else changes.change_reject
    try:
        decided = decide(change=change, actor=actor, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, f"Not {verb}d: {exc.message}")
        return back
    messages.success(request, f"Change {decided.pk}: {changes.change_state_now(decided)}.")
    return back
