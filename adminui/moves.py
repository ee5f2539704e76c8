"""What a label move would do, worked out before it happens, for the confirmation page.

Read-only and unlocked: it describes the state as it is now. The move itself runs in
label_move / label_rollback under their locks, and the confirm step re-checks that the label
still points where the person saw it point (see views.label_move)."""

from dataclasses import dataclass

from access.actors import Actor
from access.models import Role
from registry.models import Bundle, BundleVersion, Label
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

    @property
    def old_starts_draining(self) -> bool:
        return self.current is not None and not self.already_there and not self.old_other_labels

    @property
    def old_drains_at_once(self) -> bool:
        return self.old_starts_draining and self.old_active_sessions == 0


def move_consequence(*, bundle: Bundle, label_name: str, target: BundleVersion) -> Consequence:
    label = Label.objects.filter(bundle=bundle, name=label_name).select_related("version").first()
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
    )


def may_move(actor: Actor, *, protected: bool) -> bool:
    """Whether to offer a move. Mirrors the service's rule for display only: the service
    checks again and refuses a forged request."""
    return actor.has_role(Role.PUBLISHER) and (not protected or actor.has_role(Role.OPS))


def movable_labels(actor: Actor, bundle: Bundle) -> list[str]:
    return [
        label.name
        for label in Label.objects.filter(bundle=bundle).order_by("name")
        if may_move(actor, protected=label.protected)
    ]
