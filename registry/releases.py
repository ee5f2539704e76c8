"""Atomic releases: label changes across bundles applied all or none, rolled back as a whole.
Each item is applied by registry.lifecycle.label_apply_targets, the function a single move
uses too.

Locks follow the order of registry.lifecycle.locks across the whole release: every label row
first, then every version row involved, then the moves (moving label by label would take
label B after versions of label A)."""

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from audit.services import audit_record
from core import events
from core.errors import Conflict, InvalidContent, NotFound
from core.limits import RELEASE_MAX_MOVES
from registry import lifecycle
from registry.lifecycle import Targets, label_state
from registry.models import Bundle, BundleVersion, Label, Release


@dataclass(frozen=True)
class ReleaseMove:
    bundle: Bundle
    label: str
    targets: Targets
    expected_revision: int | None = None  # If-Match of this item


def _checked(moves: list[ReleaseMove], actor: Actor) -> list[ReleaseMove]:
    if not 1 <= len(moves) <= RELEASE_MAX_MOVES:
        raise InvalidContent("Invalid moves.", {"moves": [f"1 to {RELEASE_MAX_MOVES} moves."]})
    seen: set[tuple[int, str]] = set()
    checked = []
    for index, move in enumerate(moves):
        require_bundle_scope(actor, move.bundle.name)
        if (move.bundle.pk, move.label) in seen:
            raise InvalidContent(
                "A label is moved twice.", {f"moves[{index}]": ["Each bundle and label at most once per release."]}
            )
        seen.add((move.bundle.pk, move.label))
        checked.append(
            ReleaseMove(
                move.bundle,
                move.label,
                lifecycle.targets_valid(bundle=move.bundle, targets=move.targets),
                move.expected_revision,
            )
        )
    return checked


def _existing_labels(moves: list[ReleaseMove], *, lock: bool) -> dict[tuple[int, str], Label]:
    """The labels the moves name (ascending id, FOR UPDATE when `lock`). A release moves labels
    that exist: creating one is a plain label PUT, and could not be rolled back."""
    wanted = Q()
    for move in moves:
        wanted |= Q(bundle_id=move.bundle.pk, name=move.label)
    rows = Label.objects.filter(wanted).select_related("bundle", "version").order_by("pk")
    if lock:
        rows = rows.select_for_update(of=("self",))
    labels = {(label.bundle_id, label.name): label for label in rows}
    for index, move in enumerate(moves):
        if (move.bundle.pk, move.label) not in labels:
            raise NotFound(
                f"Bundle {move.bundle.name!r} has no label {move.label!r}; create it first.",
                {f"moves[{index}].label": ["No such label."]},
            )
    return labels


def release_preview(*, moves: list[ReleaseMove], actor: Actor) -> list[dict[str, Any]]:
    """What applying `moves` would do now, without changing anything (dry_run): per move,
    registry.lifecycle.label_move_preview, the preview the admin shows for the same move (what
    becomes live, what starts draining with its sessions, the verdicts on each new target,
    whether the actor may), with If-Match checked against the label's revision."""
    moves = _checked(moves, actor)
    labels = _existing_labels(moves, lock=False)
    impact = []
    for move in moves:
        label = labels[(move.bundle.pk, move.label)]
        preview = lifecycle.label_move_preview(
            bundle=move.bundle, label_name=move.label, targets=move.targets, actor=actor
        )
        stale = move.expected_revision is not None and move.expected_revision not in (0, label.revision)
        impact.append(preview.out(stale=stale))
    return impact


def release_apply(
    *, moves: list[ReleaseMove], actor: Actor, reason: Any, allow_breaking: bool = False, allow_retiring: bool = False
) -> Release:
    """Apply every move or none: one transaction, locks in the documented order. Each label's
    history row and audit entry name the release. `allow_retiring`: as for a move."""
    reason = lifecycle.require_text("reason", reason)
    require_role(actor, Role.PUBLISHER, "Applying a release")
    moves = _checked(moves, actor)
    with transaction.atomic():
        labels = _existing_labels(moves, lock=True)
        return _apply(
            labels=labels,
            moves=moves,
            actor=actor,
            reason=reason,
            allow_breaking=allow_breaking,
            allow_retiring=allow_retiring,
        )


def _apply(
    *,
    labels: dict[tuple[int, str], Label],
    moves: list[ReleaseMove],
    actor: Actor,
    reason: str,
    allow_breaking: bool = False,
    rollback_of: Release | None = None,
    approved_by: list[str] | None = None,
    allow_retiring: bool = False,
) -> Release:
    """The moves of a release, its record and its announcement; the caller holds the label rows
    (FOR UPDATE, ascending id) in its transaction. Versions are locked here, before any move."""
    involved = {vid for label in labels.values() for vid in lifecycle.label_target_ids(label)}
    involved |= {v.pk for move in moves for v, _ in move.targets}
    lifecycle.versions_lock(*involved)
    release = Release.objects.create(
        id=uuid.uuid4(),
        reason=reason,
        created_by=actor.name,
        allow_breaking=allow_breaking,
        items=[],
        rollback_of=rollback_of,
    )
    items = []
    for move in moves:
        label = labels[(move.bundle.pk, move.label)]
        lifecycle.revision_check(label, move.expected_revision)
        lifecycle.check_may_move(label_name=label.name, protected=label.protected, actor=actor)
        before = label_state(label)
        if not lifecycle.same_targets(label, move.targets):
            label = lifecycle.label_apply_targets(
                label=label,
                targets=move.targets,
                actor=actor,
                reason=reason,
                action="label.rolled_back" if rollback_of else "label.moved",
                allow_breaking=allow_breaking,
                release_id=release.pk,
                approved_by=approved_by,
                allow_retiring=allow_retiring,
            )
        items.append({"bundle": move.bundle.name, "label": label.name, "before": before, "after": label_state(label)})
    release.items = items
    release.save(update_fields=["items"])
    _announce(release, actor=actor, action="release.rolled_back" if rollback_of else "release.applied")
    return release


def release_labels_lock(moves: list[ReleaseMove]) -> dict[tuple[int, str], Label]:
    """The labels of `moves` FOR UPDATE in ascending id (the first locks of a release), for an
    approved change request (registry.changes) that applies a release."""
    return _existing_labels(moves, lock=True)


def release_apply_locked(
    *,
    labels: dict[tuple[int, str], Label],
    moves: list[ReleaseMove],
    actor: Actor,
    reason: str,
    allow_breaking: bool,
    approved_by: list[str],
    allow_retiring: bool = False,
) -> Release:
    """A release whose label rows the caller holds (release_labels_lock): an approved change
    request's, applied as its requester's with its approvers satisfying the approvals gate."""
    return _apply(
        labels=labels,
        moves=moves,
        actor=actor,
        reason=reason,
        allow_breaking=allow_breaking,
        approved_by=approved_by,
        allow_retiring=allow_retiring,
    )


def _announce(release: Release, *, actor: Actor, action: str) -> None:
    summary = [
        {"bundle": i["bundle"], "label": i["label"], "from": i["before"]["targets"], "to": i["after"]["targets"]}
        for i in release.items
    ]
    audit_record(
        actor=actor,
        action=action,
        target_type="release",
        target=str(release.pk),
        reason=release.reason,
        data={"moves": summary, **({"rollback_of": str(release.rollback_of_id)} if release.rollback_of_id else {})},
    )
    events.emit(
        "release.applied",
        release=str(release.pk),
        rollback_of=str(release.rollback_of_id or "") or None,
        moves=summary,
        by=actor.name,
        reason=release.reason,
    )


def release_rollback(*, release: Release, actor: Actor, reason: Any, allow_retiring: bool = False) -> Release:
    """Put every label of `release` back where it was before it, as one new release (ops).
    Refused (409) when any of its labels changed since, or when it was rolled back already:
    undoing someone else's later move silently is what this must never do. Back to a version
    whose model retires soon: `allow_retiring`, as for a move."""
    reason = lifecycle.require_text("reason", reason)
    require_role(actor, Role.OPS, "Rolling back a release")
    bundles = {b.name: b for b in Bundle.objects.filter(name__in={i["bundle"] for i in release.items})}
    moves = []
    for item in release.items:
        bundle = bundles[item["bundle"]]
        require_bundle_scope(actor, bundle.name)
        numbers = {t["version"]: t["weight"] for t in item["before"]["targets"]}
        versions = BundleVersion.objects.filter(bundle=bundle, number__in=numbers).order_by("number")
        moves.append(
            ReleaseMove(bundle, item["label"], [(v, numbers[v.number]) for v in versions], item["after"]["revision"])
        )
    try:
        with transaction.atomic():
            Release.objects.select_for_update().get(pk=release.pk)  # one rollback at a time
            if Release.objects.filter(rollback_of=release).exists():
                raise Conflict("This release was rolled back already.")
            labels = _existing_labels(moves, lock=True)
            changed = [
                f"{m.bundle.name}:{m.label}"
                for m in moves
                if labels[(m.bundle.pk, m.label)].revision != m.expected_revision
            ]
            if changed:
                raise Conflict("These labels changed after the release; move them yourself.", {"labels": changed})
            return _apply(
                labels=labels,
                moves=moves,
                actor=actor,
                reason=reason,
                rollback_of=release,
                allow_retiring=allow_retiring,
            )
    except IntegrityError:
        raise Conflict("This release was rolled back already.") from None
