"""The confirmation step of a label move or rollback: one preview
(registry.lifecycle.label_move_preview) shown on one of two pages, a move to one version or a
split, carrying the label's revision so the confirm is If-Match on the state it showed."""

from dataclasses import dataclass
from typing import Any

from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse

from access.actors import actor_for_user
from adminui import selectors
from adminui.evidence import evidence_summary, version_evidence_rows
from adminui.forms import MoveForm
from adminui.views.base import label_state_text, render, split_text
from core.errors import Conflict, InvalidContent
from registry.lifecycle import MovePreview, Targets, label_move_preview
from registry.models import Bundle


@dataclass(frozen=True)
class Confirm:
    """What the confirmation page of one move says around its preview."""

    label_name: str
    targets: Targets
    title: str
    hidden: list[tuple[str, str]]
    action: str
    back: str
    reason: str
    rollback: bool = False


def confirm_page(
    request: HttpRequest,
    model_admin: ModelAdmin,
    bundle: Bundle,
    confirm: Confirm,
    *,
    refusal: Conflict | None = None,
    stale: str = "",
) -> HttpResponse:
    """Step 2: what the move would do now and what the label's policy makes of it. A label
    that is or becomes a split gets the split page. The label's revision is read before the
    preview and sent back as If-Match, so a confirm never applies to a state it did not show.
    Raises InvalidContent for targets the service would refuse."""
    preview = label_move_preview(
        bundle=bundle, label_name=confirm.label_name, targets=confirm.targets, actor=actor_for_user(request.user)
    )
    common: dict[str, Any] = {
        "status": refusal.status if refusal else 200,
        "bundle": bundle,
        "refusal": refusal.message if refusal else "",
        "refused_changes": _changes_in_words(refusal.details.get("changes")) if refusal else [],
        "stale": stale,
        "rollback": confirm.rollback,
        "hidden": confirm.hidden,
        "expected_revision": preview.label.revision if preview.label else "",
        "action": confirm.action,
        "back": confirm.back,
        "reason": confirm.reason,
    }
    split = len(preview.targets) > 1 or (preview.label is not None and bool(preview.label.targets))
    if not split:
        return _single_page(request, model_admin, confirm.title, preview, common)
    return _split_page(request, model_admin, confirm.title, preview, common)


def _single_page(
    request: HttpRequest, model_admin: ModelAdmin, title: str, preview: MovePreview, common: dict[str, Any]
) -> HttpResponse:
    checks = preview.checks
    approvals = preview.approvals
    return render(
        request,
        model_admin,
        "adminui/move_confirm.html",
        title,
        consequence=preview.consequence,
        check=preview.check,
        checks_list=[checks.out()] if checks and checks.required else [],
        approvals_list=[approvals.out()] if approvals and approvals.required else [],
        classification=preview.check.diff,
        # What production says about the version the label leaves and the one it moves to.
        evidence_leaving=version_evidence_rows(preview.label.version) if preview.label is not None else [],
        evidence_moving_to=version_evidence_rows(preview.targets[0][0]) if preview.targets else [],
        # The checkbox is offered to whoever may make this move: for a protected label, ops.
        can_allow_breaking=preview.allowed,
        **common,
    )


def _split_page(
    request: HttpRequest, model_admin: ModelAdmin, title: str, preview: MovePreview, common: dict[str, Any]
) -> HttpResponse:
    """The split page: what becomes live with which weight, what leaves every target and starts
    draining, the verdict per new target, with the active sessions pinned to each version."""
    impact = preview.out()
    before = impact["current"]["targets"] if impact["current"] else []
    after = impact["becomes_live"]
    versions = selectors.versions_by_number(preview.bundle, [t["version"] for t in before + after])
    active = selectors.active_by_version({v.pk for v in versions.values()})
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
            # what production says about it so far, through this label (evidence.selectors)
            "evidence": evidence_summary(versions[t["version"]], preview.label_name),
        }
        for t in after
    ]
    needs_override = any(c["needs_allow_breaking"] for c in impact["compatibility"])
    return render(
        request,
        model_admin,
        "adminui/move_split_confirm.html",
        title,
        label_name=preview.label_name,
        creates=preview.label is None,
        current=split_text(before),
        current_primary=impact["current"]["version"] if impact["current"] else None,
        becomes=split_text(after),
        rows=rows,
        leaving=[{**row, "active": row["active_sessions"]} for row in impact["leaving"]],
        backward=preview.policy.compatibility == "backward",
        needs_override=needs_override,
        any_check=bool(checks),
        required_checks=impact["checks"],
        required_approvals=impact["approvals"],
        can_allow_breaking=needs_override and impact["allowed"],
        **common,
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


def split_errors(form: MoveForm, exc: InvalidContent, rows: list[tuple[int, int, int]]) -> None:
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


def expected_revision(request: HttpRequest) -> int | None:
    """The label's revision the confirm page was computed from (sent as If-Match to the
    service); None: the page was for a label that did not exist yet."""
    try:
        return int(request.POST.get("expected_revision", ""))
    except ValueError:
        return None


def stale_text(bundle: Bundle, name: str) -> str:
    label = selectors.label_now(bundle, name)
    now = label_state_text(label) if label else f"{name} no longer exists"
    return (
        f"The label moved since you reviewed it: {now}. Nothing has moved yet: here is what your change "
        "would do now. Decide again."
    )


def allow_breaking(request: HttpRequest) -> bool:
    return request.POST.get("allow_breaking") in ("yes", "on", "true", "1")
