"""Change requests (four eyes on a label): a move, a split change or a release that touches a
label with `required_approvals: N` whose new targets lack N version approvals becomes a pending
Change instead of a refusal. Other identities with the role the label needs approve or reject
it; at N approvals it applies as the requester's own request would have, with every check run
again at apply time, and with its approvers satisfying the approvals gate.

A change is bound to the revision of each label it touches when it was requested: approving
one whose label changed meanwhile fails it (409 change_stale) and moves nothing. Locks follow
registry.lifecycle.locks: the label rows first (a move's one row, a release's rows in
ascending id), then the change row, then the version rows (taken by the move itself). So the
N-th approval and a direct move of the same label are serial on the label row: whichever
comes second sees the other's committed revision. Rejecting takes only the change row."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope
from audit.services import audit_record
from core import events
from core.errors import ApprovalsRequired, ChangeNotPending, ChangeStale, DomainError, Forbidden, NotFound
from registry import lifecycle, releases, services
from registry.models import Bundle, BundleVersion, Change, ChangeApproval, ChangeState, Label, Release


@dataclass(frozen=True)
class MoveOutcome:
    """A label PUT's result: the label moved (or created), or the change it became."""

    label: Label | None
    created: bool
    change: Change | None


@dataclass(frozen=True)
class ReleaseOutcome:
    release: Release | None
    change: Change | None


def _targets_data(targets: lifecycle.Targets) -> list[dict[str, int]]:
    return [{"version": v.number, "weight": w} for v, w in targets]


def _targets_of(bundle: Bundle, data: list[dict[str, int]]) -> lifecycle.Targets:
    numbers = {t["version"]: t["weight"] for t in data}
    versions = BundleVersion.objects.filter(bundle=bundle, number__in=numbers).order_by("number")
    return [(v, numbers[v.number]) for v in versions]


def _approver_role(labels: list[Label]) -> str:
    return Role.OPS if any(label.protected for label in labels) else Role.PUBLISHER


def _create(
    *,
    kind: str,
    request: dict[str, Any],
    labels: list[Label],
    actor: Actor,
    reason: str,
) -> Change:
    """The pending change (the caller holds the label rows), audited and announced."""
    change = Change.objects.create(
        kind=kind,
        request=request,
        revisions=[{"bundle": lb.bundle.name, "label": lb.name, "revision": lb.revision} for lb in labels],
        bundles=sorted({lb.bundle.name for lb in labels}),
        required=max(lb.required_approvals for lb in labels),
        approver_role=_approver_role(labels),
        requester=actor.name,
        requester_role=actor.role,
        requester_scopes=list(actor.scopes),
        reason=reason,
        expires_at=timezone.now() + timedelta(hours=settings.CHANGE_TTL_HOURS),
    )
    audit_record(
        actor=actor,
        action="change.requested",
        target_type="change",
        target=str(change.pk),
        reason=reason,
        data={"kind": kind, "request": request, "revisions": change.revisions},
    )
    events.emit("change.requested", **_event_fields(change), by=actor.name, reason=reason)
    return change


def _event_fields(change: Change) -> dict[str, Any]:
    return {
        "change": str(change.pk),
        "kind": change.kind,
        "labels": [{"bundle": r["bundle"], "label": r["label"]} for r in change.revisions],
        "requester": change.requester,
        "required": change.required,
    }


def label_move_or_request(
    *,
    bundle: Bundle,
    name: str,
    actor: Actor,
    reason: str,
    version: BundleVersion | None = None,
    targets: lifecycle.Targets | None = None,
    allow_breaking: bool = False,
    compatibility: str | None = None,
    expected_revision: int | None = None,
    allow_retiring: bool = False,
    must_not_exist: bool = False,
) -> MoveOutcome:
    """registry.services.label_move, or, when the label's required approvals alone refuse it, a
    pending change request carrying the same move (what the label PUT calls)."""
    try:
        label, created = services.label_move(
            bundle=bundle,
            name=name,
            actor=actor,
            reason=reason,
            version=version,
            targets=targets,
            allow_breaking=allow_breaking,
            compatibility=compatibility,
            expected_revision=expected_revision,
            allow_retiring=allow_retiring,
            must_not_exist=must_not_exist,
        )
        return MoveOutcome(label, created, None)
    except ApprovalsRequired:
        pass  # label_move judged everything else first (lifecycle.labels._judge_new_targets)
    single: lifecycle.Targets = [(version, 100)] if version is not None else []
    wanted = lifecycle.targets_valid(bundle=bundle, targets=targets if targets is not None else single)
    with transaction.atomic():
        locked = lifecycle.label_lock(bundle=bundle, name=name)
        if locked is None:
            raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
        label = locked
        # Bound to the revision it has now; If-Match, when given, must still hold.
        lifecycle.revision_check(label, expected_revision)
        lifecycle.check_may_move(label_name=name, protected=label.protected, actor=actor)
        request = {
            "bundle": bundle.name,
            "label": name,
            "targets": _targets_data(wanted),
            "allow_breaking": allow_breaking,
            "allow_retiring": allow_retiring,
            "compatibility": compatibility,
        }
        change = _create(kind="move", request=request, labels=[label], actor=actor, reason=reason)
    return MoveOutcome(None, False, change)


def release_apply_or_request(
    *,
    moves: list[releases.ReleaseMove],
    actor: Actor,
    reason: Any,
    allow_breaking: bool = False,
    allow_retiring: bool = False,
) -> ReleaseOutcome:
    """registry.releases.release_apply, or, when required approvals alone refuse it, a pending
    change request carrying the whole release."""
    try:
        return ReleaseOutcome(
            releases.release_apply(
                moves=moves, actor=actor, reason=reason, allow_breaking=allow_breaking, allow_retiring=allow_retiring
            ),
            None,
        )
    except ApprovalsRequired:
        pass
    reason = lifecycle.require_text("reason", reason)
    checked = [
        releases.ReleaseMove(m.bundle, m.label, lifecycle.targets_valid(bundle=m.bundle, targets=m.targets))
        for m in moves
    ]
    with transaction.atomic():
        labels = releases.release_labels_lock(checked)
        for move in moves:
            lifecycle.revision_check(labels[(move.bundle.pk, move.label)], move.expected_revision)
        touched = sorted(labels.values(), key=lambda lb: lb.pk)
        request = {
            "moves": [
                {"bundle": m.bundle.name, "label": m.label, "targets": _targets_data(m.targets)} for m in checked
            ],
            "allow_breaking": allow_breaking,
            "allow_retiring": allow_retiring,
        }
        change = _create(kind="release", request=request, labels=touched, actor=actor, reason=reason)
    return ReleaseOutcome(None, change)


# --- deciding ------------------------------------------------------------------------------------


def _require_decider(*, change: Change, actor: Actor) -> None:
    """Who may approve or reject: the role the change's labels need (ops for a protected label,
    else publisher; never ci), in the scope of every bundle it touches."""
    for name in change.bundles:
        require_bundle_scope(actor, name)
    if actor.role == Role.CI or not actor.has_role(change.approver_role):
        raise Forbidden(f"Deciding this change needs the {change.approver_role} role.")


def _expired(change: Change) -> bool:
    return change.state == ChangeState.PENDING and change.expires_at <= timezone.now()


def _not_pending(change: Change) -> ChangeNotPending:
    return ChangeNotPending(f"This change is {change.state}, no longer pending.", {"state": change.state})


def _lock_labels(change: Change) -> tuple[dict[tuple[str, str], Label], list[releases.ReleaseMove]]:
    """The change's label rows FOR UPDATE (the first locks, see the module docstring), keyed by
    (bundle name, label name), and its moves rebuilt from the request."""
    items = [change.request] if change.kind == "move" else list(change.request["moves"])
    bundles = {b.name: b for b in Bundle.objects.filter(name__in={i["bundle"] for i in items})}
    moves = [
        releases.ReleaseMove(bundles[i["bundle"]], i["label"], _targets_of(bundles[i["bundle"]], i["targets"]))
        for i in items
        if i["bundle"] in bundles
    ]
    wanted = Q(pk__in=[])
    for move in moves:
        wanted |= Q(bundle_id=move.bundle.pk, name=move.label)
    rows = Label.objects.filter(wanted).select_related("bundle", "version").order_by("pk")
    labels = {(lb.bundle.name, lb.name): lb for lb in rows.select_for_update(of=("self",))}
    return labels, moves


def _requester(change: Change) -> Actor:
    return Actor(name=change.requester, role=change.requester_role, scopes=tuple(change.requester_scopes))


def _decide(change: Change, *, state: str, actor: Actor, outcome: dict[str, Any] | None = None) -> None:
    change.state = state
    change.decided_by = actor.name
    change.decided_at = timezone.now()
    change.outcome = outcome or {}
    change.save(update_fields=["state", "decided_by", "decided_at", "outcome"])


def _apply(
    *, change: Change, labels: dict[tuple[str, str], Label], moves: list[releases.ReleaseMove], approvers: list[str]
) -> dict[str, Any]:
    """Apply the change as its requester's request, in the caller's transaction (labels held)."""
    requester = _requester(change)
    # The label's history keeps the requester (updated_by) and the approvers (its move note,
    # lifecycle.labels._judge_new_targets); the audit entry and change.approved name both.
    reason = change.reason
    allow_breaking = bool(change.request.get("allow_breaking"))
    allow_retiring = bool(change.request.get("allow_retiring"))
    if change.kind == "move":
        move = moves[0]
        label = services.label_move_locked(
            label=labels[(move.bundle.name, move.label)],
            targets=lifecycle.targets_valid(bundle=move.bundle, targets=move.targets),
            actor=requester,
            reason=reason,
            allow_breaking=allow_breaking,
            compatibility=change.request.get("compatibility"),
            approved_by=approvers,
            allow_retiring=allow_retiring,
        )
        return {"label": lifecycle.label_state(label)}
    by_id = {(lb.bundle_id, lb.name): lb for lb in labels.values()}
    release = releases.release_apply_locked(
        labels=by_id,
        moves=[
            releases.ReleaseMove(m.bundle, m.label, lifecycle.targets_valid(bundle=m.bundle, targets=m.targets))
            for m in moves
        ],
        actor=requester,
        reason=reason,
        allow_breaking=allow_breaking,
        approved_by=approvers,
        allow_retiring=allow_retiring,
    )
    return {"release": str(release.pk)}


def change_approve(*, change: Change, actor: Actor, reason: object) -> Change:
    """Record `actor`'s approval of a pending change (403 for its requester and for an actor
    without the role; 409 change_not_pending when decided or expired). The approval that makes
    N applies it: 409 change_stale (the change fails) when a label moved since the request,
    and the apply-time error (checks_required, a breaking change, ...) when the move itself is
    now refused, the change failing with it. A second approval by the same identity changes
    nothing."""
    reason = lifecycle.require_text("reason", reason)
    _require_decider(change=change, actor=actor)
    if actor.name == change.requester:
        raise Forbidden("You requested this change: its approval must come from someone else (four eyes).")
    error: DomainError | None = None
    with transaction.atomic():
        labels, moves = _lock_labels(change)
        change = Change.objects.select_for_update().get(pk=change.pk)
        if _expired(change):
            change.state = ChangeState.EXPIRED
            change.save(update_fields=["state"])
        if change.state != ChangeState.PENDING:
            error = _not_pending(change)
        else:
            error = _approve_locked(change=change, actor=actor, reason=reason, labels=labels, moves=moves)
    if error is not None:
        raise error  # after the commit: an expiry or a failure is recorded
    return change


def _approve_locked(
    *,
    change: Change,
    actor: Actor,
    reason: str,
    labels: dict[tuple[str, str], Label],
    moves: list[releases.ReleaseMove],
) -> DomainError | None:
    try:
        with transaction.atomic():
            ChangeApproval.objects.create(change=change, approver=actor.name, reason=reason)
    except IntegrityError:
        return None  # approved once already: counts once
    audit_record(
        actor=actor, action="change.approval_recorded", target_type="change", target=str(change.pk), reason=reason
    )
    approvers = list(change.approvals.order_by("id").values_list("approver", flat=True))
    if len(approvers) < change.required:
        return None
    stale = [
        {**r, "requested_revision": r["revision"], "revision": labels[key].revision if key in labels else None}
        for r in change.revisions
        if (key := (r["bundle"], r["label"])) not in labels or labels[key].revision != r["revision"]
    ]
    if stale:
        error: DomainError = ChangeStale(
            "A label this change touches changed after it was requested; the change failed. Request it again "
            "against what the label is now.",
            {"labels": stale},
        )
        _decide(change, state=ChangeState.FAILED, actor=actor, outcome={"code": error.code, "message": error.message})
        return error
    try:
        with transaction.atomic():  # a savepoint: a refused apply leaves nothing behind
            outcome = _apply(change=change, labels=labels, moves=moves, approvers=approvers)
    except DomainError as exc:
        _decide(change, state=ChangeState.FAILED, actor=actor, outcome={"code": exc.code, "message": exc.message})
        audit_record(
            actor=actor,
            action="change.failed",
            target_type="change",
            target=str(change.pk),
            data={"code": exc.code, "message": exc.message},
        )
        return exc
    _decide(change, state=ChangeState.APPLIED, actor=actor, outcome=outcome)
    audit_record(
        actor=actor,
        action="change.applied",
        target_type="change",
        target=str(change.pk),
        reason=change.reason,
        data={"requester": change.requester, "approvers": approvers, **outcome},
    )
    events.emit("change.approved", **_event_fields(change), approvers=approvers, by=actor.name, **outcome)
    return None


def change_reject(*, change: Change, actor: Actor, reason: object) -> Change:
    """Reject a pending change (anyone who may approve it; its requester too, which withdraws
    it). 409 change_not_pending when decided or expired."""
    reason = lifecycle.require_text("reason", reason)
    if actor.name != change.requester:
        _require_decider(change=change, actor=actor)
    error: DomainError | None = None
    with transaction.atomic():
        change = Change.objects.select_for_update().get(pk=change.pk)
        if _expired(change):
            change.state = ChangeState.EXPIRED
            change.save(update_fields=["state"])
        if change.state != ChangeState.PENDING:
            error = _not_pending(change)
        else:
            _decide(change, state=ChangeState.REJECTED, actor=actor, outcome={"reason": reason})
            audit_record(
                actor=actor, action="change.rejected", target_type="change", target=str(change.pk), reason=reason
            )
            events.emit("change.rejected", **_event_fields(change), by=actor.name, reason=reason)
    if error is not None:
        raise error
    return change


def change_expire_sweep() -> int:
    """Mark pending changes past their expiry expired (the periodic backstop: approve, reject and
    reads treat them as expired already). Returns how many."""
    return Change.objects.filter(state=ChangeState.PENDING, expires_at__lte=timezone.now()).update(
        state=ChangeState.EXPIRED
    )


# --- reads ---------------------------------------------------------------------------------------


def change_state_now(change: Change) -> str:
    """The state a reader sees: pending past its expiry reads as expired before the sweep."""
    return ChangeState.EXPIRED if _expired(change) else change.state


def changes_visible(*, actor: Actor, state: str | None = None) -> QuerySet[Change]:
    """The changes of bundles `actor` may see (every bundle a change touches), newest first."""
    rows = Change.objects.all()
    pattern = actor.scope_regex()
    if pattern is not None:
        visible = list(Bundle.objects.filter(name__regex=pattern).values_list("name", flat=True))
        rows = rows.filter(bundles__contained_by=visible)
    now = timezone.now()
    if state == ChangeState.PENDING:
        rows = rows.filter(state=ChangeState.PENDING, expires_at__gt=now)
    elif state == ChangeState.EXPIRED:
        rows = rows.filter(Q(state=ChangeState.EXPIRED) | Q(state=ChangeState.PENDING, expires_at__lte=now))
    elif state is not None:
        rows = rows.filter(state=state)
    return rows.prefetch_related("approvals")


def change_get(*, change_id: Any, actor: Actor) -> Change:
    change = changes_visible(actor=actor).filter(pk=change_id).first()
    if change is None:
        raise NotFound("No such change.")
    return change


def change_moves(change: Change) -> list[tuple[Bundle, str, lifecycle.Targets]]:
    """What the change would move, as (bundle, label, targets), for its impact preview
    (registry.lifecycle.label_move_preview in the admin)."""
    items = [change.request] if change.kind == "move" else list(change.request["moves"])
    bundles = {b.name: b for b in Bundle.objects.filter(name__in={i["bundle"] for i in items})}
    return [
        (bundles[i["bundle"]], i["label"], _targets_of(bundles[i["bundle"]], i["targets"]))
        for i in items
        if i["bundle"] in bundles
    ]
