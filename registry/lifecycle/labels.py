"""The rules of a label and its moves, and the one function that applies a move.

Rules, as plain functions the services and the previews share: who may move which label, what
a new label is created with, what a label's compatibility policy, required checks and required
approvals make of a target, what a valid split is, If-Match. `label_apply_targets` points a
locked label at its new targets; registry.services (move, rollback) and registry.releases
(every item of a release) both call it, and `label_moved_emit` builds the `label.moved` event
for it and for a label's creation. Locks are taken in registry.lifecycle.locks' order."""

from dataclasses import asdict, dataclass
from typing import Any

from django.utils import timezone

from access.actors import Actor
from access.models import Role
from audit.services import audit_record
from core import events
from core.errors import (
    ApprovalsRequired,
    ChecksRequired,
    Conflict,
    Forbidden,
    InvalidContent,
    ModelRetiring,
    NotFound,
    PreconditionFailed,
)
from core.limits import MAX_SPLIT_TARGETS
from modelcatalog.selectors import retirement_warning
from registry.contracts import Change, Diff, by_severity, diff_contents
from registry.lifecycle.common import content_of, history_reason
from registry.lifecycle.locks import versions_lock
from registry.lifecycle.versions import version_make_live, version_release
from registry.models import Bundle, BundleVersion, Compatibility, Label, VersionState
from registry.selectors import (
    approvals_of,
    checks_latest,
    label_targets_out,
    model_retired_error,
    version_model_info,
)

# compatibility (see registry.contracts). Other new labels are neither, unless the move says so.
# That is the only place a name matters: afterwards every rule reads the label's own policy
# (protected, compatibility, required_checks, required_approvals), which ops change with label_policy_set.
PROTECTED_ON_CREATE = frozenset({"production"})
COMPATIBLE_ON_CREATE = frozenset({"production"})

# A label's targets as a move asks for them: (version, weight) pairs, weights summing to 100.
Targets = list[tuple[BundleVersion, int]]


def label_target_ids(label: Label) -> list[int]:
    """Every version the label targets (weight 0 included)."""
    return [t["version_id"] for t in label.targets] if label.targets else [label.version_id]


# --- rules of a label move ---------------------------------------------------------------------


@dataclass(frozen=True)
class LabelPolicy:
    protected: bool
    compatibility: str  # a Compatibility value


def new_label_policy(name: str, *, compatibility: str | None = None) -> LabelPolicy:
    """What a label is created with: `production` is protected and requires backward
    compatibility; `compatibility`, when given, overrides the default policy."""
    if compatibility is None:
        compatibility = Compatibility.BACKWARD if name in COMPATIBLE_ON_CREATE else Compatibility.NONE
    return LabelPolicy(protected=name in PROTECTED_ON_CREATE, compatibility=compatibility)


def move_refusal(actor: Actor, *, label_name: str, protected: bool) -> str | None:
    """Why `actor` may not move (or create) a label, or None when it may."""
    if not actor.has_role(Role.PUBLISHER):
        return f"Moving a label needs the {Role.PUBLISHER} role."
    if protected and not actor.has_role(Role.OPS):
        return f"The label {label_name!r} is protected: only ops may move it."
    return None


def may_move(actor: Actor, *, protected: bool) -> bool:
    """Whether `actor` may move a label that is (or would be created) `protected`."""
    return move_refusal(actor, label_name="", protected=protected) is None


def label_is_protected(*, bundle: Bundle, name: str) -> bool:
    """Whether moving `name` needs ops: the existing label's flag, or for a new label the
    flag it would be created with."""
    protected = Label.objects.filter(bundle=bundle, name=name).values_list("protected", flat=True).first()
    return new_label_policy(name).protected if protected is None else protected


def check_may_move(*, label_name: str, protected: bool, actor: Actor) -> None:
    refusal = move_refusal(actor, label_name=label_name, protected=protected)
    if refusal is not None:
        raise Forbidden(refusal)


def check_targetable(version: BundleVersion) -> BundleVersion:
    """A (locked) version a label may point at: anything but revoked."""
    if version.state == VersionState.REVOKED:
        raise Conflict(f"Version {version.number} is revoked; a label cannot point at it.")
    return version


@dataclass(frozen=True)
class CompatibilityCheck:
    """What a label's compatibility policy makes of a move from `current` to a target:
    `required` when the label requires backward compatibility and the move changes its target;
    `rollback` when the target is a version this label targeted before (exempt: that state was
    already live under this label, and ops must be able to undo at once); `diff` the
    classification against the current target, most severe change first (None when there is
    nothing to compare, or the policy does not apply and nobody asked for it)."""

    required: bool
    rollback: bool
    diff: Diff | None

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.diff.changes if c.level == "major"] if self.diff else []

    @property
    def applies(self) -> bool:
        return self.required and not self.rollback

    @property
    def needs_override(self) -> bool:
        """The move is refused unless it says allow_breaking."""
        return self.applies and self.diff is not None and self.diff.level == "major"


def compatibility_check(
    *, label: Label | None, current: BundleVersion | None, target: BundleVersion, classify: bool = False
) -> CompatibilityCheck:
    """The policy of `label` (None: a label being created, which is not checked) applied to a
    move from `current` to `target`. The diff is computed only when the policy needs it, or
    when `classify` asks for it (a preview shows it whatever the policy)."""
    if label is None or current is None or current.pk == target.pk:
        return CompatibilityCheck(required=False, rollback=False, diff=None)
    required = label.compatibility == Compatibility.BACKWARD
    if not required and not classify:
        return CompatibilityCheck(required=False, rollback=False, diff=None)
    rollback = label.history.filter(version_id=target.pk).exists()
    if rollback and not classify:
        return CompatibilityCheck(required=required, rollback=True, diff=None)
    diff = by_severity(diff_contents(content_of(current), content_of(target)))
    return CompatibilityCheck(required=required, rollback=rollback, diff=diff)


def compatibility_note(*, label: Label, current: BundleVersion, target: BundleVersion, allow_breaking: bool) -> str:
    """Apply the label's compatibility policy to a move; returns the note the history keeps,
    or raises Conflict (with the breaking changes) for a major move without allow_breaking."""
    check = compatibility_check(label=label, current=current, target=target)
    if not check.required:
        return ""
    if check.rollback:
        return f"compatibility check not applied: version {target.number} was this label's target before (rollback)"
    assert check.diff is not None  # required and not a rollback: compatibility_check classified
    if not check.needs_override:
        return f"compatibility check passed: {check.diff.level} against version {current.number}"
    breaking = [asdict(change) for change in check.breaking]
    if not allow_breaking:
        raise Conflict(
            f"Version {target.number} breaks agents on {label.name!r} (major against version {current.number}); "
            'fix it, or send "allow_breaking": true with a reason.',
            {"level": "major", "changes": breaking},
        )
    return f"breaking change allowed (allow_breaking): {len(breaking)} major change(s) against version {current.number}"


@dataclass(frozen=True)
class ChecksVerdict:
    """What a label's required checks make of `target`: the names it requires, those never
    reported for the target's content hash, those whose latest report is not a success. A
    version the label targeted before passes whatever its checks say (a rollback must never
    wait for CI)."""

    version: int
    content_hash: str
    required: list[str]
    missing: list[str]
    failing: list[dict[str, str]]
    rollback: bool

    @property
    def passes(self) -> bool:
        return self.rollback or not (self.missing or self.failing)

    def out(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "required": self.required,
            "missing": self.missing,
            "failing": self.failing,
            "rollback": self.rollback,
            "passes": self.passes,
        }


def checks_verdict(*, label: Label, target: BundleVersion) -> ChecksVerdict:
    required = list(label.required_checks or [])
    if not required:
        return ChecksVerdict(target.number, target.content_hash, [], [], [], False)
    rollback = label.history.filter(version_id=target.pk).exists()
    latest = {c.name: c.status for c in checks_latest(bundle_id=target.bundle_id, content_hash=target.content_hash)}
    missing = [name for name in required if name not in latest]
    failing = [{"name": n, "status": latest[n]} for n in required if n in latest and latest[n] != "success"]
    return ChecksVerdict(target.number, target.content_hash, required, missing, failing, rollback)


def require_checks(*, label: Label, target: BundleVersion) -> None:
    """ChecksRequired (409 checks_required) unless `target` passes the label's required checks."""
    verdict = checks_verdict(label=label, target=target)
    if verdict.passes:
        return
    parts = [f"never reported: {', '.join(verdict.missing)}"] if verdict.missing else []
    parts += [f"{f['name']} is {f['status']}" for f in verdict.failing]
    raise ChecksRequired(
        f"Version {target.number} has not passed the checks {label.name!r} requires ({'; '.join(parts)}).",
        {
            "version": target.number,
            "content_hash": target.content_hash,
            "missing": verdict.missing,
            "failing": verdict.failing,
        },
    )


@dataclass(frozen=True)
class ApprovalsVerdict:
    """What a label's required approvals make of `target`: how many distinct people other than
    the version's author approved its content hash, against how many the label requires. A
    version the label targeted before passes (a rollback, exempt like the required checks)."""

    version: int
    content_hash: str
    required: int
    approvers: list[str]
    rollback: bool

    @property
    def missing(self) -> int:
        return max(0, self.required - len(self.approvers))

    @property
    def passes(self) -> bool:
        return self.rollback or self.missing == 0

    def out(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "required": self.required,
            "approvers": self.approvers,
            "missing": self.missing,
            "rollback": self.rollback,
            "passes": self.passes,
        }


def approvals_verdict(*, label: Label, target: BundleVersion) -> ApprovalsVerdict:
    """Counted from the approvals table as this statement sees it: label_apply_targets calls it
    after locking the target's row, which approval_record and approval_withdraw lock too, so the
    count is the committed one (registry.lifecycle.locks)."""
    required = label.required_approvals
    if not required:
        return ApprovalsVerdict(target.number, target.content_hash, 0, [], False)
    rollback = label.history.filter(version_id=target.pk).exists()
    approvers = [
        a.approver
        for a in approvals_of(bundle_id=target.bundle_id, content_hash=target.content_hash)
        if a.approver != target.author  # never recorded (four eyes); and never counted
    ]
    return ApprovalsVerdict(target.number, target.content_hash, required, approvers, rollback)


def require_approvals(*, label: Label, target: BundleVersion) -> None:
    """ApprovalsRequired (409 approvals_required) unless `target`'s content has the label's
    required number of approvals."""
    verdict = approvals_verdict(label=label, target=target)
    if verdict.passes:
        return
    raise ApprovalsRequired(
        f"Version {target.number} has {len(verdict.approvers)} of the {verdict.required} approval(s) "
        f"{label.name!r} requires ({verdict.missing} missing).",
        {
            "version": target.number,
            "content_hash": target.content_hash,
            "required": verdict.required,
            "approvals": len(verdict.approvers),
            "approvers": verdict.approvers,
            "missing": verdict.missing,
        },
    )


# --- the state of a label, If-Match, valid targets ----------------------------------------------


def label_etag(label: Label) -> str:
    return f'"rev-{label.revision}"'


def label_state(label: Label) -> dict[str, Any]:
    """A label's state as answers show it (the 412's `current`, a release's before and after)."""
    return {
        "version": label.version.number,
        "targets": label_targets_out(label),
        "revision": label.revision,
        "etag": label_etag(label),
    }


def revision_check(label: Label | None, expected_revision: int | None) -> None:
    """If-Match: the caller saw revision `expected_revision` (0: the label must merely exist)."""
    if expected_revision is None:
        return
    if label is None:
        raise PreconditionFailed("The label does not exist, so it cannot match.", {"current": None})
    if expected_revision and label.revision != expected_revision:
        raise PreconditionFailed(
            f"The label {label.name!r} changed since you read it (now revision {label.revision}); "
            "read it again and decide on what it is now.",
            {"current": label_state(label)},
        )


def targets_valid(*, bundle: Bundle, targets: Targets) -> Targets:
    """A split is 1 to MAX_SPLIT_TARGETS distinct versions of this bundle whose integer weights
    (0 to 100) sum to 100. Returned in version number order."""
    if not isinstance(targets, list) or not 1 <= len(targets) <= MAX_SPLIT_TARGETS:
        raise InvalidContent("Invalid targets.", {"targets": [f"1 to {MAX_SPLIT_TARGETS} targets."]})
    for index, (version, weight) in enumerate(targets):
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise InvalidContent("Invalid weight.", {f"targets[{index}].weight": ["An integer from 0 to 100."]})
        if version.bundle_id != bundle.pk:
            raise NotFound("That version does not belong to this bundle.")
    if len({v.pk for v, _ in targets}) != len(targets):
        raise InvalidContent("A version is listed twice.", {"targets": ["Each version at most once."]})
    if sum(w for _, w in targets) != 100:
        raise InvalidContent("Weights must add up to 100.", {"targets": ["The weights must sum to 100."]})
    return sorted(targets, key=lambda t: t[0].number)


def same_targets(label: Label, targets: Targets) -> bool:
    """Whether `label` targets exactly `targets` now (the same versions with the same weights)."""
    current = (
        sorted((t["version_id"], t["weight"]) for t in label.targets) if label.targets else [(label.version_id, 100)]
    )
    return current == sorted((v.pk, w) for v, w in targets)


# --- applying a move ---------------------------------------------------------------------------


def targets_out(targets: Targets) -> list[dict[str, int]]:
    """What Label.targets stores for `targets`: empty for one target at 100 (not a split)."""
    return [{"version_id": v.pk, "number": v.number, "weight": w} for v, w in targets] if len(targets) > 1 else []


def primary_of(targets: Targets) -> BundleVersion:
    """The primary target: the largest weight, ties to the newest."""
    return max(targets, key=lambda t: (t[1], t[0].number))[0]


def label_moved_emit(
    *, label: Label, from_version: int | None, actor: Actor, reason: str, rollback: bool = False, release_id: Any = None
) -> None:
    """The `label.moved` webhook event (docs/webhooks.md), for a move, a rollback, a release
    item and a label's creation (`from_version` None) alike: its one payload."""
    events.emit(
        "label.moved",
        bundle=label.bundle.name,
        label=label.name,
        from_version=from_version,
        to_version=label.version.number,
        targets=label_targets_out(label),
        rollback=rollback,
        release=str(release_id) if release_id else None,
        by=actor.name,
        reason=reason,
    )


def retiring_notes(*, label: Label, joining: list[BundleVersion], allow_retiring: bool) -> list[str]:
    """The model check of the versions joining a label: a version whose model has retired is
    refused (409 model_retired: its sessions could not start); one whose model retires within
    MODEL_RETIREMENT_WARNING is refused with 409 model_retiring unless `allow_retiring`, and
    then noted in the label's history with the move's reason."""
    warning = retirement_warning()
    retiring = []
    for target in joining:
        _, info = version_model_info(target)
        if info is None or not info.retiring_within(warning):
            continue
        if info.retired():
            raise model_retired_error(
                info=info,
                message=(
                    f"Version {target.number} uses {info.name}, retired on {info.retires_at}: no session could "
                    f"start on it. Migrate it (POST .../versions/{target.number}/derive/)."
                ),
                status=409,
            )
        retiring.append((target, info))
    if retiring and not allow_retiring:
        first = retiring[0][1]
        raise ModelRetiring(
            f"Version {retiring[0][0].number} uses {first.name}, which retires on {first.retires_at}; "
            f"repeat with allow_retiring and a reason to move {label.name!r} anyway.",
            {
                "versions": [
                    {
                        "version": target.number,
                        "model": info.name,
                        "retires_at": info.retires_at.isoformat() if info.retires_at else None,
                        "replacement": info.replacement,
                    }
                    for target, info in retiring
                ]
            },
        )
    return [
        f"v{target.number}: model {info.name} retires on {info.retires_at} (allow_retiring)"
        for target, info in retiring
    ]


def _judge_new_targets(
    *,
    label: Label,
    locked: dict[int, BundleVersion],
    targets: Targets,
    allow_breaking: bool,
    approved_by: list[str] | None = None,
    allow_retiring: bool = False,
) -> list[str]:
    """Every target that joins the label passes its required checks, its compatibility policy
    against the current primary target and its required approvals; returns the notes the
    history keeps. A version that already is a target (a weight change) was judged when it
    joined. Approvals come last, so that a move refused for them alone is one a change request
    (registry.changes) can carry; `approved_by`, the approvers of such a change, satisfies the
    approvals gate when they are as many as the label requires."""
    old_ids = label_target_ids(label)
    notes = []
    joining = []
    for version, _ in targets:
        target = check_targetable(locked[version.pk])
        if target.pk in old_ids:
            continue
        require_checks(label=label, target=target)
        note = compatibility_note(
            label=label, current=locked[label.version_id], target=target, allow_breaking=allow_breaking
        )
        if note:
            notes.append(f"v{target.number}: {note}" if len(targets) > 1 else note)
        joining.append(target)
    notes += retiring_notes(label=label, joining=joining, allow_retiring=allow_retiring)
    if joining and approved_by is not None and len(approved_by) >= label.required_approvals:
        if label.required_approvals:
            notes.append(f"change request approved by {', '.join(approved_by)}")
        return notes
    for target in joining:
        require_approvals(label=label, target=target)
    return notes


def label_apply_targets(
    *,
    label: Label,
    targets: Targets,
    actor: Actor,
    reason: str,
    action: str = "label.moved",
    allow_breaking: bool = False,
    release_id: Any = None,
    approved_by: list[str] | None = None,
    allow_retiring: bool = False,
) -> Label:
    """Point a label whose row this transaction has locked at `targets` (already valid: see
    targets_valid). The one implementation of a move, shared by label_move, label_rollback and
    every item of a release. Takes the version locks itself (re-locking rows this transaction
    holds is free, so a release may lock them all first). Protection is the caller's check;
    compatibility and required checks apply to each target that joins the label. Versions that
    leave every target are released (registry.lifecycle.versions.version_release)."""
    old_ids = label_target_ids(label)
    old_primary = label.version_id
    locked = versions_lock(*old_ids, *(v.pk for v, _ in targets))
    notes = _judge_new_targets(
        label=label,
        locked=locked,
        targets=targets,
        allow_breaking=allow_breaking,
        approved_by=approved_by,
        allow_retiring=allow_retiring,
    )
    for version, _ in targets:
        version_make_live(version=locked[version.pk])
    label.move_note = "; ".join(notes)
    label.change_kind = "move"
    label.previous_version_id = old_primary
    label.version = locked[primary_of(targets).pk]
    label.targets = targets_out(targets)
    label.revision += 1
    label.release = release_id
    label.updated_at = timezone.now()
    label.updated_by = actor.name
    label._change_reason = history_reason(reason)  # recorded by django-simple-history
    label.save()
    from_number = locked[old_primary].number
    label_moved_emit(
        label=label,
        from_version=from_number,
        actor=actor,
        reason=reason,
        rollback=action == "label.rolled_back",
        release_id=release_id,
    )
    for old_id in sorted(set(old_ids) - {v.pk for v, _ in targets}):
        version_release(version=locked[old_id])
    audit_record(
        actor=actor,
        action=action,
        target_type="label",
        target=f"{label.bundle.name}:{label.name}",
        reason=reason,
        data={
            "from_version": from_number,
            "to_version": label.version.number,
            "targets": label_targets_out(label),
            "note": label.move_note,
            **({"release": str(release_id)} if release_id else {}),
            **({"approvers": approved_by} if approved_by is not None else {}),
        },
    )
    return label
