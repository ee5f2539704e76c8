"""Label pages: the list, a move (step 1: one version or a split; step 2: the confirmation of
adminui.views.moves; then registry.services.label_move, If-Match on the revision step 2
showed) and a rollback (registry.services.label_rollback)."""

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.actors import Actor, actor_for_user
from access.models import Role
from adminui import selectors
from adminui.forms import SPLIT_ROWS, MoveForm, RollbackForm, add_domain_error, set_choices
from adminui.moves import movable_labels, suggested_labels
from adminui.views.base import (
    bundle_of,
    label_of,
    need_role,
    need_view,
    render,
    split_text,
    url,
    version_choices,
    version_label,
    version_of,
)
from adminui.views.moves import (
    Confirm,
    allow_breaking,
    confirm_page,
    expected_revision,
    split_errors,
    stale_text,
)
from core.errors import Conflict, DomainError, Forbidden, InvalidContent, NotFound, PreconditionFailed
from registry import changes
from registry import services as registry_services
from registry.lifecycle import Targets, label_is_protected, may_move, same_targets
from registry.models import Bundle, BundleVersion, Label
from registry.selectors import label_targets_out


def label_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Every label of every bundle as `production → v2` with its target's state (replaces the
    stock list, which showed the target as "2@1")."""
    need_view(request, model_admin)
    q = request.GET.get("q", "").strip()
    labels = selectors.label_search(q)
    targets = selectors.label_targets(labels)
    rows = [{"label": label, "targets": targets[label.pk]} for label in labels]
    return render(request, model_admin, "adminui/label_list.html", "Labels", rows=rows, q=q)


# --- a move ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """What step 1 asked for: a label, one version or a split, and why."""

    bundle: Bundle
    label_name: str
    reason: str
    field: str  # the form field that named the label (an offered one, or a new name)
    rows: list[tuple[int, int, int]]  # the split's (row, version number, weight); empty: one version
    single: BundleVersion | None
    targets: Targets
    hidden: list[tuple[str, str]]  # step 1's fields, carried through step 2

    @classmethod
    def from_form(cls, request: HttpRequest, bundle: Bundle, form: MoveForm) -> "Move":
        rows: list[tuple[int, int, int]] = form.cleaned_data["split"]
        single: BundleVersion | None = None
        if rows:
            targets = [(version_of(bundle, number), weight) for _, number, weight in rows]
        else:
            single = version_of(bundle, form.cleaned_data["version"])
            targets = [(single, 100)]
        return cls(
            bundle=bundle,
            label_name=form.cleaned_data["name"],
            reason=form.cleaned_data["reason"],
            field="label" if form.cleaned_data.get("label") else "new_label",
            rows=rows,
            single=single,
            targets=targets,
            hidden=[(k, request.POST.get(k, "")) for k in form.fields if k != "targets"],
        )

    def confirm(self) -> Confirm:
        name, bundle = self.label_name, self.bundle.name
        if self.single is not None:
            title = f"Confirm: move {name} to v{self.single.number}"
            back = url("adminui_move", bundle, query=f"label={name}&version={self.single.number}")
        else:
            title = f"Confirm: {name} → {split_text([{'version': v.number, 'weight': w} for v, w in self.targets])}"
            back = url("adminui_move", bundle, query=f"label={name}")
        return Confirm(
            label_name=name,
            targets=self.targets,
            title=title,
            hidden=self.hidden,
            action=url("adminui_move", bundle),
            back=back,
            reason=self.reason,
        )


def label_move(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Step 1 (form: one version or a split) -> step 2 (confirmation stating the consequence,
    carrying the label's revision) -> the move, If-Match on that revision."""
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    offered = movable_labels(actor, bundle)
    suggested = suggested_labels(actor, bundle)
    choices = [(label.name, f"{label.name} (compatibility: {label.compatibility})") for label in offered] + suggested
    versions = version_choices(bundle)
    if request.method != "POST":
        need_role(actor, Role.PUBLISHER, "Moving a label")
        initial = _move_initial(request, offered, suggested)
        return _move_form(request, model_admin, bundle, MoveForm(initial=initial, labels=choices, versions=versions))
    form = MoveForm(request.POST, labels=choices, versions=versions)
    if not form.is_valid():
        return _move_form(request, model_admin, bundle, form)
    move = Move.from_form(request, bundle, form)
    if request.POST.get("confirm") != "yes":
        return _move_review(request, model_admin, actor, form, move)
    return _move_apply(request, model_admin, actor, form, move)


def _move_initial(request: HttpRequest, offered: list[Label], suggested: list[tuple[str, str]]) -> dict[str, Any]:
    """Step 1 filled from the link that led here (?label=&version=); a split label starts from
    its weights (a ramp is usually a change of them)."""
    initial: dict[str, Any] = {"label": request.GET.get("label", ""), "version": request.GET.get("version", "")}
    chosen = next((label for label in offered if label.name == initial["label"]), None)
    if initial["label"] and chosen is None and initial["label"] not in dict(suggested):
        raise PermissionDenied(f"You may not move the label {initial['label']!r}: it is protected (Ops only).")
    if chosen is not None and chosen.targets and not initial["version"]:
        for row, t in enumerate(chosen.targets[:SPLIT_ROWS], 1):
            initial[f"split_version_{row}"], initial[f"split_weight_{row}"] = t["number"], t["weight"]
    return initial


def _move_review(
    request: HttpRequest, model_admin: ModelAdmin, actor: Actor, form: MoveForm, move: Move
) -> HttpResponse:
    """Step 1 posted: say at once what the confirm would be refused for (a protected label, an
    existing one or `production` typed as a new name, is for ops only), or show step 2."""
    bundle = move.bundle
    if not may_move(actor, protected=label_is_protected(bundle=bundle, name=move.label_name)):
        form.add_error(move.field, f"The label {move.label_name!r} is protected: only ops may move it.")
        return _move_form(request, model_admin, bundle, form, status=403)
    existing = selectors.label_now(bundle, move.label_name)
    if existing is not None and same_targets(existing, move.targets):
        form.add_error(
            "version" if move.single else "targets",
            f"{move.label_name} already targets {split_text(label_targets_out(existing))}: there is nothing to move.",
        )
        return _move_form(request, model_admin, bundle, form)
    try:
        return confirm_page(request, model_admin, bundle, move.confirm())
    except InvalidContent as exc:
        split_errors(form, exc, move.rows)
        return _move_form(request, model_admin, bundle, form, status=exc.status)


def _move_apply(
    request: HttpRequest, model_admin: ModelAdmin, actor: Actor, form: MoveForm, move: Move
) -> HttpResponse:
    """Step 2 confirmed: the move, If-Match on the revision step 2 showed."""
    bundle = move.bundle
    expected = expected_revision(request)
    if expected is None and selectors.label_now(bundle, move.label_name) is not None:
        # Reviewed as a new label; someone created it since.
        return confirm_page(request, model_admin, bundle, move.confirm(), stale=stale_text(bundle, move.label_name))
    try:
        # As the label PUT: a move the label's required approvals alone refuse becomes a change
        # request, decided on the Changes page.
        outcome = changes.label_move_or_request(
            bundle=bundle,
            name=move.label_name,
            version=move.single,
            targets=None if move.single else move.targets,
            actor=actor,
            reason=move.reason,
            allow_breaking=allow_breaking(request),
            expected_revision=expected,
        )
    except PreconditionFailed:
        return confirm_page(request, model_admin, bundle, move.confirm(), stale=stale_text(bundle, move.label_name))
    except DomainError as exc:
        return _move_refused(request, model_admin, form, move, exc)
    if outcome.change is not None:
        messages.success(
            request,
            f"{move.label_name} has not moved yet: change {outcome.change.pk} waits for "
            f"{outcome.change.required} approval(s) by someone else.",
        )
        return HttpResponseRedirect(url("adminui_changes"))
    assert outcome.label is not None
    _report_move(request, outcome.label, outcome.created)
    return HttpResponseRedirect(url("adminui_bundle", bundle.name))


def _move_refused(
    request: HttpRequest, model_admin: ModelAdmin, form: MoveForm, move: Move, exc: DomainError
) -> HttpResponse:
    """The service refused the move: a breaking change shows step 2 again with the refusal and
    the changes; anything else goes back to step 1, next to the field it is about."""
    if isinstance(exc, Conflict) and exc.details.get("changes"):
        return confirm_page(request, model_admin, move.bundle, move.confirm(), refusal=exc)
    if isinstance(exc, InvalidContent) and move.rows:
        split_errors(form, exc, move.rows)
    else:
        # Forbidden is about the label; anything else (a revoked target, say) about the version.
        default = move.field if isinstance(exc, Forbidden) else "version"
        add_domain_error(form, exc, field_map={"label": move.field}, default=default)
    return _move_form(request, model_admin, move.bundle, form, status=exc.status)


def _move_form(
    request: HttpRequest, model_admin: ModelAdmin, bundle: Bundle, form: MoveForm, *, status: int = 200
) -> HttpResponse:
    actor = actor_for_user(request.user)
    return render(
        request,
        model_admin,
        "adminui/move_form.html",
        f"Move a label of {bundle.name}",
        status=status,
        bundle=bundle,
        form=form,
        hidden_protected=[n for n in selectors.protected_label_names(bundle) if not may_move(actor, protected=True)],
    )


def _report_move(request: HttpRequest, label: Label, created: bool) -> None:
    version = selectors.version_brief(label.version_id)
    text = f"Moved {label.name}: it now targets v{version.number}."
    if label.targets:
        text = f"Moved {label.name}: it now targets {split_text(label_targets_out(label))}."
    if created:
        text = f"Created label {label.name}: it targets {split_text(label_targets_out(label))}."
    elif label.previous_version_id and not label.targets:
        old = selectors.version_brief(label.previous_version_id)
        sessions = selectors.active_on(old)
        text += f" v{old.number} is {old.state}" + (
            f" with {sessions} active session{'s' if sessions != 1 else ''}." if sessions else "."
        )
    messages.success(request, text)


# --- a rollback ------------------------------------------------------------------------------


def label_rollback(request: HttpRequest, model_admin: ModelAdmin, name: str, label: str) -> HttpResponse:
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    obj = label_of(bundle, label)
    # Versions the label targeted before, newest move first; the service refuses any other.
    offered = selectors.rollback_choices(obj)
    versions = [(v.number, version_label(v)) for v in offered]
    if request.method != "POST":
        need_role(actor, Role.OPS, "Rolling back")
        if not versions:
            raise NotFound(f"{label} has never targeted another version: there is nothing to roll back to.")
        previous = next((v for v in offered if v.pk == obj.previous_version_id), None)
        form = RollbackForm(initial={"version": previous.number if previous else None}, versions=versions)
        return _rollback_form(request, model_admin, bundle, obj, form, versions)
    # Forged posts may name any version; the service decides. Offer-list validation would hide that.
    form = RollbackForm(request.POST, versions=version_choices(bundle, exclude_revoked=False))
    if not form.is_valid():
        return _rollback_form(request, model_admin, bundle, obj, form, versions)
    target = version_of(bundle, form.cleaned_data["version"])
    if obj.version_id == target.pk and not obj.targets:
        # Never a confirm page saying "moves from v1 to v1" (and the service refuses it too).
        form.add_error("version", f"{label} already targets v{target.number}: there is nothing to roll back.")
        return _rollback_form(request, model_admin, bundle, obj, form, versions)
    confirm = Confirm(
        label_name=label,
        targets=[(target, 100)],
        title=f"Confirm: roll {label} back to v{target.number}",
        hidden=[(k, request.POST.get(k, "")) for k in ("version", "reason")],
        action=url("adminui_rollback", bundle.name, label),
        back=url("adminui_rollback", bundle.name, label),
        reason=form.cleaned_data["reason"],
        rollback=True,
    )
    expected = expected_revision(request)
    if request.POST.get("confirm") != "yes" or expected is None:
        return confirm_page(request, model_admin, bundle, confirm)
    try:
        moved = registry_services.label_rollback(
            bundle=bundle, name=label, to_version=target, actor=actor, reason=confirm.reason, expected_revision=expected
        )
    except PreconditionFailed:
        return confirm_page(request, model_admin, bundle, confirm, stale=stale_text(bundle, label))
    except DomainError as exc:
        add_domain_error(form, exc, field_map={"to_version": "version"})
        return _rollback_form(request, model_admin, bundle, obj, form, versions, status=exc.status)
    _report_move(request, moved, False)
    return HttpResponseRedirect(url("adminui_bundle", bundle.name))


def _rollback_form(
    request: HttpRequest,
    model_admin: ModelAdmin,
    bundle: Bundle,
    label: Label,
    form: RollbackForm,
    versions: list[tuple[int, str]],
    *,
    status: int = 200,
) -> HttpResponse:
    # Whatever the POST was validated against, the page offers only the versions this label
    # targeted before (never its current target): an error must not widen the list.
    set_choices(form, "version", versions)
    return render(
        request,
        model_admin,
        "adminui/rollback_form.html",
        f"Roll back {label.name} of {bundle.name}",
        status=status,
        bundle=bundle,
        label=label,
        targets=split_text(label_targets_out(label)),
        form=form,
    )
