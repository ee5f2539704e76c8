"""Previews, read-only and unlocked (the state as it is now): what a label move, a publish or a
revoke would do, computed by the same rules the services apply under their locks when the
write happens. The admin's confirmation pages and the API's dry runs show these."""

from dataclasses import dataclass
from typing import Any

from access.actors import Actor
from access.permissions import require_bundle_scope
from core.errors import InvalidContent
from registry import composition, pins
from registry.canonical import normalise_content
from registry.contracts import check_content
from registry.lifecycle.common import content_of
from registry.lifecycle.labels import (
    ApprovalsVerdict,
    ChecksVerdict,
    CompatibilityCheck,
    LabelPolicy,
    Targets,
    approvals_verdict,
    checks_verdict,
    compatibility_check,
    label_state,
    label_target_ids,
    move_refusal,
    new_label_policy,
    primary_of,
    same_targets,
    targets_valid,
)
from registry.models import Bundle, BundleVersion, Label, VersionState


@dataclass(frozen=True)
class MoveConsequence:
    """A move to one target, in the words of the admin's confirmation page."""

    label: str
    creates_label: bool
    current: BundleVersion | None  # what the label targets now (None: a new label)
    target: BundleVersion
    already_there: bool
    old_other_labels: list[str]  # other labels that keep the old version live
    old_active_sessions: int
    compatibility: str  # the label's policy; for a new label, the one it is created with
    protected: bool  # for a new label, whether it is created protected

    @property
    def old_starts_draining(self) -> bool:
        return self.current is not None and not self.already_there and not self.old_other_labels

    @property
    def old_drains_at_once(self) -> bool:
        return self.old_starts_draining and self.old_active_sessions == 0


@dataclass(frozen=True)
class Leaving:
    """A version that leaves every target of the label."""

    version: BundleVersion
    other_labels: list[str]  # other labels that keep it live
    active_sessions: int

    @property
    def starts_draining(self) -> bool:
        return not self.other_labels

    def out(self) -> dict[str, Any]:
        return {
            "version": self.version.number,
            "starts_draining": self.starts_draining,
            "active_sessions": self.active_sessions,
        }


@dataclass(frozen=True)
class Joining:
    """A version that joins the label's targets, judged as label_apply_targets will judge it:
    the compatibility policy against the current primary target, and the required checks."""

    version: BundleVersion
    check: CompatibilityCheck
    checks: ChecksVerdict | None  # None for a label being created (it has no required checks)
    approvals: ApprovalsVerdict | None = None  # None for a label being created (it requires none)

    def out(self) -> dict[str, Any]:
        return {
            "version": self.version.number,
            "level": self.check.diff.level if self.check.diff else None,
            "policy_applies": self.check.applies,
            "needs_allow_breaking": self.check.needs_override,
            "breaking": [c.message for c in self.check.breaking],
        }


@dataclass(frozen=True)
class MovePreview:
    """What pointing `label_name` at `targets` (one version at 100, or a split) would do now,
    and whether the actor may do it: the one preview of a move, which the admin's confirmation
    pages show and the API's release dry run answers (`out`). The move itself runs in
    label_apply_targets under its locks and applies the same rules."""

    bundle: Bundle
    label_name: str
    label: Label | None  # None: the move creates the label
    policy: LabelPolicy  # the label's, or the one it is created with
    current: BundleVersion | None  # the primary target now
    targets: Targets
    leaving: list[Leaving]
    joining: list[Joining]
    refusal: str | None  # why the actor may not make this move (None: it may)
    consequence: MoveConsequence  # the move in the words of one target (the primary)

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    @property
    def check(self) -> CompatibilityCheck:
        """The compatibility verdict on the primary target (classified whatever the policy)."""
        target = self.consequence.target
        joined = next((j for j in self.joining if j.version.pk == target.pk), None)
        if joined is not None:
            return joined.check
        return compatibility_check(label=self.label, current=self.current, target=target, classify=True)

    @property
    def checks(self) -> ChecksVerdict | None:
        """The required-checks verdict on the primary target when it joins the label."""
        return next((j.checks for j in self.joining if j.version.pk == self.consequence.target.pk), None)

    @property
    def gates(self) -> list[ChecksVerdict]:
        """The required-checks verdicts of the joining targets (none when the label requires none)."""
        if self.label is None or not self.label.required_checks:
            return []
        return [j.checks for j in self.joining if j.checks is not None]

    @property
    def approvals(self) -> ApprovalsVerdict | None:
        """The required-approvals verdict on the primary target when it joins the label."""
        return next((j.approvals for j in self.joining if j.version.pk == self.consequence.target.pk), None)

    @property
    def approval_gates(self) -> list[ApprovalsVerdict]:
        """The required-approvals verdicts of the joining targets (none when the label requires none)."""
        if self.label is None or not self.label.required_approvals:
            return []
        return [j.approvals for j in self.joining if j.approvals is not None]

    @property
    def gate_refusal(self) -> str | None:
        """Why the joining targets' gates (required checks, then approvals) refuse the move."""
        for gate in self.gates:
            if not gate.passes:
                return f"Version {gate.version} has not passed the label's required checks."
        for approval in self.approval_gates:
            if not approval.passes:
                return f"Version {approval.version} lacks {approval.missing} of the label's required approvals."
        return None

    @property
    def unchanged(self) -> bool:
        return self.label is not None and same_targets(self.label, self.targets)

    def out(self, *, stale: bool = False) -> dict[str, Any]:
        """The preview as the release dry run answers it (docs/api.md); `stale`: the caller's
        If-Match does not match the label's revision."""
        failing = self.gate_refusal
        return {
            "bundle": self.bundle.name,
            "label": self.label_name,
            "current": label_state(self.label) if self.label is not None else None,
            "becomes_live": [{"version": v.number, "weight": w} for v, w in self.targets],
            "unchanged": self.unchanged,
            "leaving": [leaving.out() for leaving in self.leaving],
            "compatibility": [joining.out() for joining in self.joining],
            "checks": [gate.out() for gate in self.gates],
            "approvals": [gate.out() for gate in self.approval_gates],
            "allowed": self.refusal is None and not stale and failing is None,
            "refusal": self.refusal
            or ("If-Match does not match the label's current state." if stale else None)
            or failing,
        }


def _others(version_id: int, label: Label | None) -> list[str]:
    labels = Label.objects.targeting(version_id)
    if label is not None:
        labels = labels.exclude(pk=label.pk)
    return list(labels.order_by("name").values_list("name", flat=True))


def _leaving(label: Label, targets: Targets) -> list[Leaving]:
    gone = set(label_target_ids(label)) - {v.pk for v, _ in targets}
    return [
        Leaving(
            version=version,
            other_labels=_others(version.pk, label),
            active_sessions=pins.active_on(version.pk),
        )
        for version in BundleVersion.objects.filter(pk__in=gone).defer("canonical").order_by("number")
    ]


def _joining(label: Label | None, current: BundleVersion | None, targets: Targets) -> list[Joining]:
    already = set(label_target_ids(label)) if label is not None else set()
    return [
        Joining(
            version=version,
            check=compatibility_check(label=label, current=current, target=version, classify=True),
            checks=checks_verdict(label=label, target=version) if label is not None else None,
            approvals=approvals_verdict(label=label, target=version) if label is not None else None,
        )
        for version, _ in targets
        if version.pk not in already
    ]


def _consequence(
    *, label_name: str, label: Label | None, policy: LabelPolicy, current: BundleVersion | None, target: BundleVersion
) -> MoveConsequence:
    return MoveConsequence(
        label=label_name,
        creates_label=label is None,
        current=current,
        target=target,
        already_there=current is not None and current.pk == target.pk,
        old_other_labels=_others(current.pk, label) if current is not None else [],
        old_active_sessions=pins.active_on(current.pk) if current is not None else 0,
        compatibility=policy.compatibility,
        protected=policy.protected,
    )


def label_move_preview(
    *,
    bundle: Bundle,
    label_name: str,
    actor: Actor,
    target: BundleVersion | None = None,
    targets: Targets | None = None,
) -> MovePreview:
    """The preview of pointing `label_name` at `target` alone, or at `targets` (a split).
    Raises InvalidContent (or NotFound) for targets the move would refuse as invalid."""
    require_bundle_scope(actor, bundle.name)
    wanted = targets_valid(bundle=bundle, targets=targets if targets is not None else [(target, 100)] if target else [])
    label = Label.objects.select_related("bundle", "version").filter(bundle=bundle, name=label_name).first()
    current = None
    policy = new_label_policy(label_name)
    if label is not None:
        current = BundleVersion.objects.defer("canonical").get(pk=label.version_id)
        policy = LabelPolicy(protected=label.protected, compatibility=label.compatibility)
    return MovePreview(
        bundle=bundle,
        label_name=label_name,
        label=label,
        policy=policy,
        current=current,
        targets=wanted,
        leaving=_leaving(label, wanted) if label is not None else [],
        joining=_joining(label, current, wanted),
        refusal=move_refusal(actor, label_name=label_name, protected=policy.protected),
        consequence=_consequence(
            label_name=label_name, label=label, policy=policy, current=current, target=primary_of(wanted)
        ),
    )


@dataclass(frozen=True)
class PublishCheck:
    """The contract checks of a content document: `errors` (path -> messages, paths with the
    request's `content.` prefix) block a publish; `warnings` are returned with it."""

    errors: dict[str, list[str]]
    warnings: list[dict[str, str]]

    def raise_errors(self) -> None:
        if self.errors:
            raise InvalidContent("The bundle contradicts itself; see details for each place.", self.errors)


def contract_check(doc: dict[str, Any], *, previous: dict[str, Any] | None) -> PublishCheck:
    """registry.contracts' checks of a normalised document against the previous version's."""
    result = check_content(doc, previous)
    errors: dict[str, list[str]] = {}
    for finding in result.errors:
        errors.setdefault(f"content.{finding.path}", []).append(finding.message)
    return PublishCheck(errors, [{"path": f"content.{w.path}", "message": w.message} for w in result.warnings])


def latest_content(bundle: Bundle) -> dict[str, Any] | None:
    latest = BundleVersion.objects.filter(bundle=bundle).order_by("-number").first()
    return content_of(latest) if latest else None


def version_publish_check(*, bundle: Bundle, content: object, actor: Actor | None = None) -> PublishCheck:
    """What publishing `content` would be told, without publishing: raises InvalidContent for
    a document that is not a content document at all, else returns the contract checks
    against the bundle's latest version (version_publish applies the same two steps). With the
    `actor` who would publish, its includes are resolved first, as version_publish does."""
    if actor is not None:
        content = composition.content_resolved(content=content, bundle=bundle, actor=actor)
    return contract_check(normalise_content(content), previous=latest_content(bundle))


@dataclass(frozen=True)
class RevokePreview:
    labels: list[str]  # labels that target the version: they must move first
    active_sessions: int  # sessions that get 410 version_revoked on their next fetch


def version_revoke_preview(*, version: BundleVersion) -> RevokePreview:
    labels = list(Label.objects.targeting(version.pk).order_by("name").values_list("name", flat=True))
    # A revoked version's sessions already get 410: none is left to cut off.
    active = 0 if version.state == VersionState.REVOKED else pins.active_on(version.pk)
    return RevokePreview(labels=labels, active_sessions=active)
