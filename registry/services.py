"""Writes to bundles, versions and labels. Each top-level service owns its transaction.

Lock order, shared with sessions_app.services so that nothing can deadlock:
label row first, then version rows in ascending id order. See sessions_app.services for
why this makes session start, label moves and drains safe against each other."""

import re
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from audit.services import audit_record
from registry import bundle_cache, events
from registry.canonical import canonicalise
from registry.errors import Conflict, Forbidden, InvalidContent, NotFound
from registry.models import (
    BUNDLE_NAME_RE,
    LABEL_NAME_RE,
    PROTECTED_ON_CREATE,
    Bundle,
    BundleVersion,
    Label,
    VersionState,
)
from sessions_app import services as sessions_services

MAX_MESSAGE_CHARS = 10_000


def _require_text(field: str, value: Any, *, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidContent(f"A {field} is required.", {field: ["This field is required and may not be blank."]})
    if len(value) > max_chars:
        raise InvalidContent(f"The {field} is too long.", {field: [f"At most {max_chars} characters."]})
    return value


@dataclass(frozen=True)
class PublishResult:
    version: BundleVersion
    created: bool  # False when identical canonical content already existed: publishing is idempotent
    warnings: list[dict[str, str]] = field(default_factory=list)


def _require_role(actor: Actor, role: str, doing: str) -> None:
    # Services check roles themselves, so the API, the admin and commands share one rule.
    if not actor.has_role(role):
        raise Forbidden(f"{doing} needs the {role} role.")


def _text_field(field: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_MESSAGE_CHARS:
        raise InvalidContent(f"The {field} is not valid.", {field: ["Must be a string of at most 10000 characters."]})
    return value


def bundle_create(*, name: Any, actor: Actor, description: Any = "", when_to_use: Any = "") -> Bundle:
    _require_role(actor, Role.PUBLISHER, "Creating a bundle")
    if not isinstance(name, str) or not re.fullmatch(BUNDLE_NAME_RE, name):
        raise InvalidContent("The bundle name is not valid.", {"name": [f"Must match {BUNDLE_NAME_RE}."]})
    if not actor.may_see_bundle(name):
        # The same answer whether or not the name exists: scope must not reveal other bundles.
        raise Forbidden(f"Your key may only create bundles matching {', '.join(actor.scopes)}.")
    description = _text_field("description", description)
    when_to_use = _text_field("when_to_use", when_to_use)
    try:
        with transaction.atomic():
            bundle = Bundle.objects.create(
                name=name, description=description, when_to_use=when_to_use, created_by=actor.name
            )
            audit_record(actor=actor, action="bundle.created", target_type="bundle", target=name)
            return bundle
    except IntegrityError:
        raise Conflict(f"A bundle named {name!r} already exists.", {"name": [name]}) from None


@transaction.atomic
def bundle_update(*, bundle: Bundle, actor: Actor, description: Any, when_to_use: Any) -> Bundle:
    """Change what a bundle says about itself (its name and versions never change)."""
    _require_role(actor, Role.PUBLISHER, "Editing a bundle")
    bundle.description = _text_field("description", description)
    bundle.when_to_use = _text_field("when_to_use", when_to_use)
    bundle.save(update_fields=["description", "when_to_use"])
    audit_record(actor=actor, action="bundle.updated", target_type="bundle", target=bundle.name)
    return bundle


@transaction.atomic
def version_publish(*, bundle: Bundle, content: Any, message: Any, actor: Actor) -> PublishResult:
    """Publish `content` as the next version, or return the existing version with the same
    canonical content (created=False), so that publishing is idempotent."""
    _require_role(actor, Role.PUBLISHER, "Publishing a version")
    message = _require_text("message", message)
    canonical, digest = canonicalise(content)
    # The bundle row lock serialises publishers of one bundle: numbers stay gapless and two
    # identical publishes cannot both insert. NO KEY: session and label inserts, whose foreign
    # keys take KEY SHARE on the bundle, need not wait for a publish.
    Bundle.objects.select_for_update(no_key=True).get(pk=bundle.pk)
    existing = BundleVersion.objects.filter(bundle=bundle, content_hash=digest).first()
    if existing is not None:
        return PublishResult(existing, False)
    last = BundleVersion.objects.filter(bundle=bundle).order_by("-number").values_list("number", flat=True).first()
    version = BundleVersion.objects.create(
        bundle=bundle,
        number=(last or 0) + 1,
        canonical=canonical,
        content_hash=digest,
        message=message,
        author=actor.name,
    )
    audit_record(
        actor=actor,
        action="version.published",
        target_type="version",
        target=f"{bundle.name}@{version.number}",
        reason=message,
        data={"number": version.number, "content_hash": digest},
    )
    return PublishResult(version, True)


def _check_may_move(*, label_name: str, protected: bool, actor: Actor) -> None:
    _require_role(actor, Role.PUBLISHER, "Moving a label")
    if protected and not actor.has_role(Role.OPS):
        raise Forbidden(f"The label {label_name!r} is protected: only ops may move it.")


def _lock_versions(*ids: int) -> dict[int, BundleVersion]:
    # Ascending id order, the same in every service: two movers never wait on each other in a cycle.
    wanted = sorted(set(ids))
    return {v.pk: v for v in BundleVersion.objects.select_for_update(of=("self",)).filter(pk__in=wanted).order_by("pk")}


def _move_locked(
    *, label: Label, version: BundleVersion, actor: Actor, reason: str, action: str = "label.moved"
) -> Label:
    """Move a label whose row this transaction has locked. Takes the version locks itself."""
    old_id = label.version_id
    locked = _lock_versions(old_id, version.pk)
    target = locked[version.pk]
    if target.state == VersionState.REVOKED:
        raise Conflict(f"Version {target.number} is revoked; a label cannot point at it.")
    sessions_services.version_make_live(version=target)
    now = timezone.now()
    label.previous_version_id = old_id
    label.version = target
    label.updated_at = now
    label.updated_by = actor.name
    label._change_reason = reason  # recorded by django-simple-history
    label.save()
    sessions_services.version_release(version=locked[old_id])
    audit_record(
        actor=actor,
        action=action,
        target_type="label",
        target=f"{label.bundle.name}:{label.name}",
        reason=reason,
        data={"from_version": locked[old_id].number, "to_version": target.number},
    )
    return label


def _lock_label(*, bundle: Bundle, name: str) -> Label | None:
    return Label.objects.select_for_update(of=("self",)).filter(bundle=bundle, name=name).first()


def label_move(*, bundle: Bundle, name: Any, version: BundleVersion, actor: Actor, reason: Any) -> tuple[Label, bool]:
    """Point label `name` at `version`, creating the label if needed; returns (label, created).

    The version it leaves starts draining (or is drained at once, with no active session)
    in the same transaction when no other label still targets it."""
    if not isinstance(name, str) or not re.fullmatch(LABEL_NAME_RE, name):
        raise InvalidContent("The label name is not valid.", {"label": [f"Must match {LABEL_NAME_RE}."]})
    reason = _require_text("reason", reason)
    if version.bundle_id != bundle.pk:
        raise NotFound("That version does not belong to this bundle.")
    for attempt in range(2):
        try:
            with transaction.atomic():
                label = _lock_label(bundle=bundle, name=name)
                if label is None:
                    return _label_create(bundle=bundle, name=name, version=version, actor=actor, reason=reason), True
                _check_may_move(label_name=name, protected=label.protected, actor=actor)
                if label.version_id == version.pk:
                    return label, False  # already there: nothing moved, nothing recorded
                return _move_locked(label=label, version=version, actor=actor, reason=reason), False
        except IntegrityError:
            # Two first moves of a new label raced on its unique name; the loser retries as a move.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _label_create(*, bundle: Bundle, name: str, version: BundleVersion, actor: Actor, reason: str) -> Label:
    protected = name in PROTECTED_ON_CREATE
    _check_may_move(label_name=name, protected=protected, actor=actor)
    target = _lock_versions(version.pk)[version.pk]
    if target.state == VersionState.REVOKED:
        raise Conflict(f"Version {target.number} is revoked; a label cannot point at it.")
    sessions_services.version_make_live(version=target)
    label = Label(
        bundle=bundle,
        name=name,
        version=target,
        protected=protected,
        updated_at=timezone.now(),
        updated_by=actor.name,
    )
    label._change_reason = reason
    label.save()  # a concurrent first move of the same name fails here; label_move retries
    audit_record(
        actor=actor,
        action="label.created",
        target_type="label",
        target=f"{bundle.name}:{name}",
        reason=reason,
        data={"to_version": target.number, "protected": protected},
    )
    return label


def label_rollback(*, bundle: Bundle, name: str, to_version: BundleVersion | None, actor: Actor, reason: Any) -> Label:
    """Move a label back to a version it targeted before: `to_version`, or by default the one
    before its current target. Ops only; 409 when there is nothing to go back to."""
    reason = _require_text("reason", reason)
    _require_role(actor, Role.OPS, "Rolling back")
    with transaction.atomic():
        label = _lock_label(bundle=bundle, name=name)
        if label is None:
            raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
        if to_version is None:
            if label.previous_version_id is None:
                raise Conflict(
                    f"The label {name!r} has never targeted another version, so there is nothing to roll back to."
                )
            target = BundleVersion.objects.get(pk=label.previous_version_id)
        else:
            target = to_version
            if target.bundle_id != bundle.pk:
                raise NotFound("That version does not belong to this bundle.")
            if not label.history.filter(version_id=target.pk).exists():
                raise Conflict(
                    f"The label {name!r} never targeted version {target.number}; move it with PUT instead.",
                    {"to_version": [target.number]},
                )
        if target.pk == label.version_id:
            raise Conflict(f"The label {name!r} already targets version {target.number}.")
        return _move_locked(label=label, version=target, actor=actor, reason=reason, action="label.rolled_back")


@transaction.atomic
def version_revoke(*, version: BundleVersion, actor: Actor, reason: Any) -> BundleVersion:
    """Take a version out of service. Its sessions then get 410 version_revoked."""
    reason = _require_text("reason", reason)
    _require_role(actor, Role.OPS, "Revoking a version")
    version = _lock_versions(version.pk)[version.pk]
    if version.state == VersionState.REVOKED:
        return version
    labels = list(Label.objects.filter(version=version).values_list("name", flat=True))
    if labels:
        raise Conflict(
            f"Version {version.number} is targeted by {', '.join(labels)}; move those labels first.",
            {"labels": labels},
        )
    version.state = VersionState.REVOKED
    version.revoked_at = timezone.now()
    version.revoke_reason = reason
    version.save(update_fields=["state", "revoked_at", "revoke_reason"])
    digest, bundle_name, number = version.content_hash, version.bundle.name, version.number
    audit_record(
        actor=actor,
        action="version.revoked",
        target_type="version",
        target=f"{bundle_name}@{number}",
        reason=reason,
        data={"number": number, "content_hash": digest},
    )

    def after_commit() -> None:
        bundle_cache.drop(digest)
        events.emit("version.revoked", bundle=bundle_name, version=number, content_hash=digest, by=actor.name)

    transaction.on_commit(after_commit)
    return version
