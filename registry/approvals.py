"""Approvals of a version's content (four eyes), bound to its content hash like a check: who may
approve, recording and withdrawing one. A label's required approvals count them
(registry.lifecycle.labels.approvals_verdict); a move whose target lacks them becomes a change
request (registry.changes). registry.services names these functions too."""

from django.db import transaction

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope
from audit.services import audit_record
from core import events
from core.errors import Conflict, Forbidden
from registry import lifecycle
from registry.models import Bundle, BundleVersion, VersionApproval, VersionState


def _approval_refusal(*, version: BundleVersion, actor: Actor) -> None:
    """Who may approve: a publisher, ops or admin (not ci, not agent), in the bundle's scope,
    who is not the version's author (four eyes)."""
    if actor.role == Role.CI or not actor.has_role(Role.PUBLISHER):
        raise Forbidden("Approving a version needs the publisher role (or ops, or admin).")
    if actor.name == version.author:
        raise Forbidden(
            f"{actor.name} published version {version.number}: its approval must come from someone else (four eyes)."
        )


def approval_record(*, version: BundleVersion, actor: Actor, reason: object) -> tuple[VersionApproval, bool]:
    """Record `actor`'s approval of `version`'s content hash (one per approver: a second one by
    the same identity changes nothing and answers the first; created is False). Locks the
    version row first, like a move to it, so a move counts approvals that are committed."""
    reason = lifecycle.require_text("reason", reason)
    bundle = Bundle.objects.get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle.name)
    _approval_refusal(version=version, actor=actor)
    with transaction.atomic():
        locked = lifecycle.versions_lock(version.pk)[version.pk]
        if locked.state == VersionState.REVOKED:
            raise Conflict(f"Version {locked.number} is revoked; it cannot be approved.")
        approval, created = VersionApproval.objects.get_or_create(
            bundle=bundle, content_hash=locked.content_hash, approver=actor.name, defaults={"reason": reason}
        )
        if not created:
            return approval, False
        audit_record(
            actor=actor,
            action="approval.recorded",
            target_type="version",
            target=f"{bundle.name}@{locked.number}",
            reason=reason,
            data={"content_hash": locked.content_hash},
        )
        events.emit(
            "approval.recorded",
            bundle=bundle.name,
            version=locked.number,
            content_hash=locked.content_hash,
            by=actor.name,
            reason=reason,
        )
    return approval, True


def approval_withdraw(*, version: BundleVersion, actor: Actor, reason: object) -> bool:
    """Withdraw `actor`'s own approval of `version`'s content hash (False: there was none).
    Under the version row lock, so a move either ran before (and counted it) or sees it gone."""
    reason = lifecycle.require_text("reason", reason)
    bundle = Bundle.objects.get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle.name)
    with transaction.atomic():
        locked = lifecycle.versions_lock(version.pk)[version.pk]
        deleted, _ = VersionApproval.objects.filter(
            bundle=bundle, content_hash=locked.content_hash, approver=actor.name
        ).delete()
        if deleted:
            audit_record(
                actor=actor,
                action="approval.withdrawn",
                target_type="version",
                target=f"{bundle.name}@{locked.number}",
                reason=reason,
                data={"content_hash": locked.content_hash},
            )
    return bool(deleted)
