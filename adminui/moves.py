"""What a label move would do, worked out before it happens, for the confirmation page.

Read-only and unlocked: it describes the state as it is now. The move itself runs in
label_move / label_rollback under their locks, and the confirm step re-checks that the label
still points where the person saw it point (see views.label_move)."""

import json
from dataclasses import dataclass, replace
from typing import Any

from access.actors import Actor
from access.models import Role
from registry.contracts import LEVELS, Diff, diff_contents
from registry.models import COMPATIBLE_ON_CREATE, PROTECTED_ON_CREATE, Bundle, BundleVersion, Compatibility, Label
from sessions_app.models import Session


@dataclass(frozen=True)
class Consequence:
    label: str
    creates_label: bool
    current: BundleVersion | None  # what the label targets now (None: a new label)
    target: BundleVersion
    already_there: bool
    old_other_labels: list[str]  # other labels that keep the old version live
    old_active_sessions: int
    compatibility: str  # the label's policy ("none" | "backward"); for a new label, the one it is created with
    protected: bool  # for a new label, whether it is created protected

    @property
    def old_starts_draining(self) -> bool:
        return self.current is not None and not self.already_there and not self.old_other_labels

    @property
    def old_drains_at_once(self) -> bool:
        return self.old_starts_draining and self.old_active_sessions == 0


def move_consequence(*, bundle: Bundle, label_name: str, target: BundleVersion) -> Consequence:
    label = Label.objects.filter(bundle=bundle, name=label_name).first()
    current = None
    others: list[str] = []
    sessions = 0
    if label is not None:
        current = BundleVersion.objects.defer("canonical").get(pk=label.version_id)
        others = list(
            Label.objects.filter(version_id=current.pk)
            .exclude(pk=label.pk)
            .order_by("name")
            .values_list("name", flat=True)
        )
        sessions = Session.objects.active().pinned_to(current.pk).count()
    return Consequence(
        label=label_name,
        creates_label=label is None,
        current=current,
        target=target,
        already_there=current is not None and current.pk == target.pk,
        old_other_labels=others,
        old_active_sessions=sessions,
        compatibility=label.compatibility
        if label is not None
        else (Compatibility.BACKWARD if label_name in COMPATIBLE_ON_CREATE else Compatibility.NONE),
        protected=label.protected if label is not None else label_name in PROTECTED_ON_CREATE,
    )


def by_severity(diff: Diff) -> Diff:
    """The same classification with its changes most severe first (stable within a level)."""
    return replace(diff, changes=sorted(diff.changes, key=lambda c: -LEVELS.index(c.level)))


def classify(old: dict[str, Any], new: dict[str, Any]) -> Diff:
    """registry.contracts' classification of a change, most severe first."""
    return by_severity(diff_contents(old, new))


def _content(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(BundleVersion.objects.only("canonical").get(pk=version.pk).canonical))


@dataclass(frozen=True)
class CompatibilityCheck:
    """What the label's compatibility policy makes of a move, as registry.services applies it
    (_compatibility_note): `required` when the label requires backward compatibility and there
    is a current target; `rollback` when the target is a version this label targeted before
    (exempt); `diff` the classification against the current target (None for a new label)."""

    required: bool
    rollback: bool
    diff: Diff | None

    @property
    def breaking(self) -> list[Any]:
        return [c for c in self.diff.changes if c.level == "major"] if self.diff else []

    @property
    def applies(self) -> bool:
        return self.required and not self.rollback

    @property
    def needs_override(self) -> bool:
        """The move is refused unless it says allow_breaking."""
        return self.applies and self.diff is not None and self.diff.level == "major"


def compatibility_check(*, bundle: Bundle, consequence: Consequence) -> CompatibilityCheck:
    if consequence.current is None or consequence.already_there:
        return CompatibilityCheck(required=False, rollback=False, diff=None)  # creating a label is not checked
    label = Label.objects.get(bundle=bundle, name=consequence.label)
    rollback = label.history.filter(version_id=consequence.target.pk).exists()
    diff = classify(_content(consequence.current), _content(consequence.target))
    return CompatibilityCheck(
        required=consequence.compatibility == Compatibility.BACKWARD, rollback=rollback, diff=diff
    )


def may_move(actor: Actor, *, protected: bool) -> bool:
    """Whether to offer a move. Mirrors the service's rule for display only: the service
    checks again and refuses a forged request."""
    return actor.has_role(Role.PUBLISHER) and (not protected or actor.has_role(Role.OPS))


def movable_labels(actor: Actor, bundle: Bundle) -> list[Label]:
    return [
        label
        for label in Label.objects.filter(bundle=bundle).order_by("name")
        if may_move(actor, protected=label.protected)
    ]
