"""Writes to bundles, versions and labels. Each top-level service owns its transaction.

Lock order, shared with sessions_app.services so that nothing can deadlock:
label row first, then version rows in ascending id order. See sessions_app.services for
why this makes session start, label moves and drains safe against each other."""

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from audit.services import audit_record
from registry import bundle_cache, events
from registry.canonical import canonicalise
from registry.contracts import check_content, diff_contents
from registry.errors import Conflict, Forbidden, InvalidContent, NotFound
from registry.models import (
    BUNDLE_NAME_RE,
    COMPATIBLE_ON_CREATE,
    LABEL_NAME_RE,
    PROTECTED_ON_CREATE,
    Bundle,
    BundleVersion,
    Compatibility,
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
    doc, canonical, digest = canonicalise(content)
    existing = BundleVersion.objects.filter(bundle=bundle, content_hash=digest).first()
    if existing is not None:
        return PublishResult(existing, False)  # already published (and checked) once
    # The contract checks run before the lock below: they can take a while on large schemas.
    # "Previous" is the latest version when we read it; a publish racing in between can only
    # change which stale tool names are warned about.
    warnings = _check_contract(doc, previous=_latest_content(bundle))
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
        data={"number": version.number, "content_hash": digest, "warnings": len(warnings)},
    )
    return PublishResult(version, True, warnings)


def _content_of(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(version.canonical))


def _latest_content(bundle: Bundle) -> dict[str, Any] | None:
    latest = BundleVersion.objects.filter(bundle=bundle).order_by("-number").first()
    return _content_of(latest) if latest else None


def _check_contract(doc: dict[str, Any], *, previous: dict[str, Any] | None) -> list[dict[str, str]]:
    """Refuse a bundle inconsistent with itself (InvalidContent naming each place); return the
    warnings. Paths get the request's `content.` prefix, like the document's own errors."""
    result = check_content(doc, previous)
    if result.errors:
        details: dict[str, list[str]] = {}
        for finding in result.errors:
            details.setdefault(f"content.{finding.path}", []).append(finding.message)
        raise InvalidContent("The bundle contradicts itself; see details for each place.", details)
    return [{"path": f"content.{w.path}", "message": w.message} for w in result.warnings]


def _check_may_move(*, label_name: str, protected: bool, actor: Actor) -> None:
    _require_role(actor, Role.PUBLISHER, "Moving a label")
    if protected and not actor.has_role(Role.OPS):
        raise Forbidden(f"The label {label_name!r} is protected: only ops may move it.")


def _targetable(version: BundleVersion) -> BundleVersion:
    """A locked version a label may point at: anything but revoked."""
    if version.state == VersionState.REVOKED:
        raise Conflict(f"Version {version.number} is revoked; a label cannot point at it.")
    return version


def _lock_versions(*ids: int) -> dict[int, BundleVersion]:
    # Ascending id order, the same in every service: two movers never wait on each other in a cycle.
    wanted = sorted(set(ids))
    return {v.pk: v for v in BundleVersion.objects.select_for_update(of=("self",)).filter(pk__in=wanted).order_by("pk")}


def _compatibility_note(*, label: Label, current: BundleVersion, target: BundleVersion, allow_breaking: bool) -> str:
    """Apply the label's compatibility policy to a move; returns the note the history keeps.

    A move back to a version this label targeted before is exempt: that state was already
    live under this label, and ops must be able to undo at once."""
    if label.compatibility != Compatibility.BACKWARD:
        return ""
    if label.history.filter(version_id=target.pk).exists():
        return f"compatibility check not applied: version {target.number} was this label's target before (rollback)"
    diff = diff_contents(_content_of(current), _content_of(target))
    if diff.level != "major":
        return f"compatibility check passed: {diff.level} against version {current.number}"
    breaking = [asdict(change) for change in diff.changes if change.level == "major"]
    if not allow_breaking:
        raise Conflict(
            f"Version {target.number} breaks agents on {label.name!r} (major against version {current.number}); "
            'fix it, or send "allow_breaking": true with a reason.',
            {"level": "major", "changes": breaking},
        )
    return f"breaking change allowed (allow_breaking): {len(breaking)} major change(s) against version {current.number}"


def _move_locked(
    *,
    label: Label,
    version: BundleVersion,
    actor: Actor,
    reason: str,
    action: str = "label.moved",
    allow_breaking: bool = False,
) -> Label:
    """Move a label whose row this transaction has locked. Takes the version locks itself."""
    old_id = label.version_id
    locked = _lock_versions(old_id, version.pk)
    target = _targetable(locked[version.pk])
    label.move_note = _compatibility_note(
        label=label, current=locked[old_id], target=target, allow_breaking=allow_breaking
    )
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
        data={"from_version": locked[old_id].number, "to_version": target.number, "note": label.move_note},
    )
    return label


def _lock_label(*, bundle: Bundle, name: str) -> Label | None:
    return Label.objects.select_for_update(of=("self",)).filter(bundle=bundle, name=name).first()


def label_move(
    *,
    bundle: Bundle,
    name: Any,
    version: BundleVersion,
    actor: Actor,
    reason: Any,
    allow_breaking: bool = False,
    compatibility: str | None = None,
) -> tuple[Label, bool]:
    """Point label `name` at `version`, creating the label if needed; returns (label, created).

    The version it leaves starts draining (or is drained at once, with no active session)
    in the same transaction when no other label still targets it. A label that requires
    compatibility refuses a `major` move unless allow_breaking (see _compatibility_note);
    `compatibility` sets the label's policy ("none" or "backward")."""
    if compatibility is not None and compatibility not in Compatibility.values:
        raise InvalidContent(
            "Unknown compatibility.", {"compatibility": [f"One of {', '.join(Compatibility.values)}."]}
        )
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
                    created = _label_create(
                        bundle=bundle,
                        name=name,
                        version=version,
                        actor=actor,
                        reason=reason,
                        compatibility=compatibility,
                    )
                    return created, True
                _check_may_move(label_name=name, protected=label.protected, actor=actor)
                if label.version_id != version.pk:
                    # Judged by the policy the label has now: a request cannot lower the policy
                    # and slip a breaking move past it at once.
                    label = _move_locked(
                        label=label, version=version, actor=actor, reason=reason, allow_breaking=allow_breaking
                    )
                if compatibility is not None and compatibility != label.compatibility:
                    _set_compatibility(label=label, compatibility=compatibility, actor=actor, reason=reason)
                return label, False
        except IntegrityError:
            # Two first moves of a new label raced on its unique name; the loser retries as a move.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _set_compatibility(*, label: Label, compatibility: str, actor: Actor, reason: str) -> None:
    """Change a label's policy (the caller holds its row lock). Not a move, so it adds no row to
    the label's move history; the audit log records it."""
    previous = label.compatibility
    label.compatibility = compatibility
    label.save_without_historical_record(update_fields=["compatibility"])
    audit_record(
        actor=actor,
        action="label.policy_changed",
        target_type="label",
        target=f"{label.bundle.name}:{label.name}",
        reason=reason,
        data={"from": previous, "to": compatibility},
    )


def _label_create(
    *, bundle: Bundle, name: str, version: BundleVersion, actor: Actor, reason: str, compatibility: str | None
) -> Label:
    protected = name in PROTECTED_ON_CREATE
    if compatibility is None:
        compatibility = Compatibility.BACKWARD if name in COMPATIBLE_ON_CREATE else Compatibility.NONE
    _check_may_move(label_name=name, protected=protected, actor=actor)
    target = _targetable(_lock_versions(version.pk)[version.pk])
    sessions_services.version_make_live(version=target)
    label = Label(
        bundle=bundle,
        name=name,
        version=target,
        protected=protected,
        compatibility=compatibility,
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


def label_rollback(
    *,
    bundle: Bundle,
    name: str,
    to_version: BundleVersion | None,
    actor: Actor,
    reason: Any,
    allow_breaking: bool = False,
) -> Label:
    """Move a label to `to_version`, or by default to the version it targeted before its current
    one (409 when there is none). Ops only. Going back to a version this label targeted before
    is exempt from its compatibility policy; any other `to_version` is judged like a move."""
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
        if target.pk == label.version_id:
            raise Conflict(f"The label {name!r} already targets version {target.number}.")
        return _move_locked(
            label=label,
            version=target,
            actor=actor,
            reason=reason,
            action="label.rolled_back",
            allow_breaking=allow_breaking,
        )


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
