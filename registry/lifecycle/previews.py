"""Previews, read-only and unlocked (the state as it is now): what a label move, a publish or a
revoke would do, computed by the same rules the services apply under their locks when the
write happens. The admin's confirmation pages and the API's dry runs show these."""

from dataclasses import dataclass
from typing import Any

from access.actors import Actor
from access.permissions import require_bundle_scope
from core.errors import InvalidContent
from registry import pins
from registry.canonical import normalise_content
from registry.contracts import check_content
from registry.lifecycle.common import content_of
from registry.lifecycle.labels import (
    ChecksVerdict,
    CompatibilityCheck,
    LabelPolicy,
    checks_verdict,
    compatibility_check,
    label_target_ids,
    move_refusal,
    new_label_policy,
)
from registry.models import Bundle, BundleVersion, Label, VersionState


@dataclass(frozen=True)
class MoveConsequence:
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
class MovePreview:
    """What moving `label` to `target` would do now, and whether the actor may do it. The move
    itself runs in registry.services.label_move under its locks and applies the same rules."""

    consequence: MoveConsequence
    check: CompatibilityCheck
    refusal: str | None  # why the actor may not make this move (None: it may)
    checks: ChecksVerdict | None = None  # the label's required checks (None: a new label)

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def label_move_preview(*, bundle: Bundle, label_name: str, target: BundleVersion, actor: Actor) -> MovePreview:
    require_bundle_scope(actor, bundle.name)
    label = Label.objects.filter(bundle=bundle, name=label_name).first()
    current = None
    others: list[str] = []
    sessions = 0
    if label is not None:
        current = BundleVersion.objects.defer("canonical").get(pk=label.version_id)
        others = list(
            Label.objects.targeting(current.pk).exclude(pk=label.pk).order_by("name").values_list("name", flat=True)
        )
        sessions = pins.active_on(current.pk)
    policy = (
        LabelPolicy(protected=label.protected, compatibility=label.compatibility)
        if label is not None
        else new_label_policy(label_name)
    )
    consequence = MoveConsequence(
        label=label_name,
        creates_label=label is None,
        current=current,
        target=target,
        already_there=current is not None and current.pk == target.pk,
        old_other_labels=others,
        old_active_sessions=sessions,
        compatibility=policy.compatibility,
        protected=policy.protected,
    )
    return MovePreview(
        consequence=consequence,
        check=compatibility_check(label=label, current=current, target=target, classify=True),
        refusal=move_refusal(actor, label_name=label_name, protected=policy.protected),
        checks=(
            checks_verdict(label=label, target=target)
            if label is not None and target.pk not in label_target_ids(label)
            else None
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


def version_publish_check(*, bundle: Bundle, content: object) -> PublishCheck:
    """What publishing `content` would be told, without publishing: raises InvalidContent for
    a document that is not a content document at all, else returns the contract checks
    against the bundle's latest version (version_publish applies the same two steps)."""
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
