"""Writes to bundles, versions and labels. Each top-level service owns its transaction, checks
the actor's role and bundle scope itself, and takes its locks in the order registry.lifecycle.locks
writes down."""

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_packs_in_scope, require_role
from audit.services import audit_record
from core import events
from core.errors import Conflict, Forbidden, InvalidContent, NotFound, PreconditionFailed
from core.limits import (
    BUNDLE_NAME_RE,
    CHECK_NAME_RE,
    LABEL_NAME_RE,
    REQUIRED_APPROVALS_MAX,
    REQUIRED_CHECKS_MAX,
    TEXT_MAX_CHARS,
    is_bundle_name,
)
from core.newlines import lf
from registry import approvals, checks, composition, includes, lifecycle, mcp_servers, skills_content
from registry.canonical import canonicalise
from registry.lifecycle import pin_policy
from registry.models import (
    Bundle,
    BundleVersion,
    Compatibility,
    Include,
    Label,
)
from registry.selectors import label_targets_out


@dataclass(frozen=True)
class PublishResult:
    version: BundleVersion
    created: bool  # False when identical canonical content already existed: publishing is idempotent
    warnings: list[dict[str, str]] = field(default_factory=list)
    # The content's model matched to the model catalog (lifecycle.publish_model_check).
    model: dict[str, Any] | None = None


def _text_field(field: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > TEXT_MAX_CHARS:
        raise InvalidContent(
            f"The {field} is not valid.", {field: [f"Must be a string of at most {TEXT_MAX_CHARS} characters."]}
        )
    return lf(value)  # `\n` line endings, as every text the registry stores (core.newlines)


def bundle_create(*, name: str, actor: Actor, description: str = "", when_to_use: str = "") -> Bundle:
    require_role(actor, Role.PUBLISHER, "Creating a bundle")
    if not is_bundle_name(name):
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
def bundle_strict_conversation_set(*, bundle: Bundle, enabled: bool, actor: Actor, reason: str) -> Bundle:
    """Switch the bundle's strict conversation setting (registry.guard) on or off: ops, with a
    reason, audited. Setting what is already set records nothing."""
    require_role(actor, Role.OPS, "Changing a bundle's conversation policy")
    require_bundle_scope(actor, bundle.name)
    reason = lifecycle.require_text("reason", reason)
    locked = Bundle.objects.select_for_update(no_key=True).get(pk=bundle.pk)
    if locked.strict_conversation == enabled:
        return locked
    locked.strict_conversation = enabled
    locked.save(update_fields=["strict_conversation"])
    audit_record(
        actor=actor,
        action="bundle.strict_conversation_set",
        target_type="bundle",
        target=locked.name,
        reason=reason,
        data={"strict_conversation": enabled},
    )
    return locked


def bundle_etag(bundle: Bundle) -> str:
    """A tag of what a bundle says about itself (description and when_to_use): what an editor
    read, for bundle_update's precondition."""
    text = f"{bundle.description}\x00{bundle.when_to_use}".encode("utf-8", "surrogatepass")
    return f'"b-{hashlib.sha256(text).hexdigest()[:32]}"'


@transaction.atomic
def bundle_update(
    *, bundle: Bundle, actor: Actor, description: str, when_to_use: str, expected_etag: str | None = None
) -> Bundle:
    """Change what a bundle says about itself (its name and versions never change).
    `expected_etag` (bundle_etag of what the editor read) is If-Match: under the bundle's row
    lock, PreconditionFailed when someone changed it since, so two editors cannot silently
    overwrite each other."""
    require_role(actor, Role.PUBLISHER, "Editing a bundle")
    require_bundle_scope(actor, bundle.name)
    if expected_etag is not None:
        bundle = Bundle.objects.select_for_update(no_key=True).get(pk=bundle.pk)
        if bundle_etag(bundle) != expected_etag:
            raise PreconditionFailed(
                f"Bundle {bundle.name!r} was changed since you read it; read it again.",
                {"current": {"description": bundle.description, "when_to_use": bundle.when_to_use}},
            )
    bundle.description = _text_field("description", description)
    bundle.when_to_use = _text_field("when_to_use", when_to_use)
    bundle.save(update_fields=["description", "when_to_use"])
    audit_record(actor=actor, action="bundle.updated", target_type="bundle", target=bundle.name)
    return bundle


@transaction.atomic
def bundle_pin_policy_set(*, bundle: Bundle, pin_any_version: object, actor: Actor, reason: str) -> Bundle:
    """Who may pin any version of the bundle by number, even one that has not passed its
    labels' required checks and approvals (registry.lifecycle.pin_policy): ops only, with a
    reason, audited with the grants before and after. Setting what is set changes nothing."""
    reason = lifecycle.require_text("reason", reason)
    require_role(actor, Role.OPS, "Granting pins of any version")
    require_bundle_scope(actor, bundle.name)
    grants = pin_policy.grants_valid(pin_any_version)
    locked = Bundle.objects.select_for_update().get(pk=bundle.pk)
    before = list(locked.pin_any_version or [])
    if before == grants:
        return locked
    locked.pin_any_version = grants
    locked.save(update_fields=["pin_any_version"])
    audit_record(
        actor=actor,
        action="bundle.pin_policy_changed",
        target_type="bundle",
        target=bundle.name,
        reason=reason,
        data={"before": before, "after": grants},
    )
    return locked


@transaction.atomic
def version_publish(
    *, bundle: Bundle, content: object, message: str, actor: Actor, resolve: bool = True
) -> PublishResult:
    """Publish `content` as the next version, or return the existing version with the same
    canonical content (created=False), so that publishing is idempotent.

    `resolve=False` is for registry.transfer's import only: `content` is bytes already verified
    against their hash, stored as they are (no marker is resolved, so a version that an older
    release stored with a literal `{{>` keeps its hash); content that carries `includes` is
    checked as a publish checks it (composition.content_pinned).

    Tools declared from MCP servers and not pinned yet are listed first (registry.mcp_servers),
    after the role and scope checks (a key that may not publish makes the registry reach
    nothing) and outside the publish's transaction: network I/O of up to a deadline per server
    must not hold a transaction open (unless the caller already holds one)."""
    require_role(actor, Role.PUBLISHER, "Publishing a version")
    require_bundle_scope(actor, bundle.name)
    if resolve:
        content = mcp_servers.content_pinned(content)
    return _version_publish(bundle=bundle, content=content, message=message, actor=actor, resolve=resolve)


@transaction.atomic
def _version_publish(*, bundle: Bundle, content: object, message: str, actor: Actor, resolve: bool) -> PublishResult:
    require_role(actor, Role.PUBLISHER, "Publishing a version")
    require_bundle_scope(actor, bundle.name)
    message = lifecycle.require_text("message", message)
    # Includes first, so the hash covers the resolved text and the snippet versions it used. No
    # lock on the snippets: a label moving meanwhile leaves a version that records what it read.
    if resolve:
        content = composition.content_resolved(content=content, bundle=bundle, actor=actor)
    else:
        composition.content_pinned(content=content, bundle=bundle, actor=actor)
    doc, canonical, digest = canonicalise(content)
    # Before the idempotent answer below: a key never gets a version naming packs it may not see.
    require_packs_in_scope(actor, list(doc.get("knowledge") or []))
    # Before the idempotent answer too: a retired model is refused whenever it is published.
    model, model_warnings = lifecycle.publish_model_check(doc)
    existing = BundleVersion.objects.filter(bundle=bundle, content_hash=digest).first()
    if existing is not None:
        return PublishResult(existing, False, model_warnings, model)  # already published (and checked) once
    # The contract checks run before the lock below: they can take a while on large schemas.
    # "Previous": the latest version when read; a racing publish only changes which stale tool names are warned about.
    check = lifecycle.contract_check(doc, previous=lifecycle.latest_content(bundle))
    check.raise_errors()
    warnings = check.warnings + model_warnings
    # The bundle row lock serialises publishers of one bundle: numbers stay gapless and two
    # identical publishes cannot both insert. NO KEY: session and label inserts, whose foreign
    # keys take KEY SHARE on the bundle, need not wait for a publish.
    Bundle.objects.select_for_update(no_key=True).get(pk=bundle.pk)
    existing = BundleVersion.objects.filter(bundle=bundle, content_hash=digest).first()
    if existing is not None:
        return PublishResult(existing, False, model_warnings, model)
    last = BundleVersion.objects.filter(bundle=bundle).order_by("-number").values_list("number", flat=True).first()
    version = BundleVersion.objects.create(
        bundle=bundle,
        number=(last or 0) + 1,
        canonical=canonical,
        content_hash=digest,
        message=message,
        author=actor.name,
    )
    _include_edges_write(version=version, doc=doc)
    lifecycle.tool_edges_write(version=version, doc=doc)
    audit_record(
        actor=actor,
        action="version.published",
        target_type="version",
        target=f"{bundle.name}@{version.number}",
        reason=message,
        data={"number": version.number, "content_hash": digest, "warnings": len(warnings)},
    )
    events.emit("version.published", bundle=bundle.name, version=version.number, content_hash=digest, by=actor.name)
    skills_content.index_after_commit(doc, digest)
    return PublishResult(version, True, warnings, model)


def _include_edges_write(*, version: BundleVersion, doc: dict[str, Any]) -> None:
    """The new version's include edges (registry.models.Include), and its bundle's earlier edges
    no longer current. Called under the bundle's row lock, which orders the publishes of one
    bundle, so the edges of exactly its latest version stay current."""
    Include.objects.filter(bundle_id=version.bundle_id, current=True).update(current=False)
    entries = includes.entries_of(doc)
    if not entries:
        return
    # Every snippet exists: composition.content_resolved found each one (by label, number or hash).
    names = {str(entry["bundle"]) for entry in entries}
    snippets = dict(Bundle.objects.filter(name__in=names).values_list("name", "pk"))
    edges = []
    for position, entry in enumerate(entries):
        ref = includes.marker_of(entry["marker"])
        assert ref is not None  # includes.normalise checked every entry against its marker
        edges.append(
            Include(
                version=version,
                bundle_id=version.bundle_id,
                position=position,
                marker=ref.text,
                snippet_id=snippets[ref.bundle],
                label="" if ref.number is not None else ref.ref,
                number=ref.number,
                pinned_version=entry["version"],
                pinned_hash=entry["content_hash"],
            )
        )
    Include.objects.bulk_create(edges)


# --- labels: moves, percentage splits, rollbacks ----------------------------------------------

# The state of a label as answers show it, and its ETag: defined with the rules of a move
# (registry.lifecycle.labels), named here too for the API.
Targets = lifecycle.Targets
label_state = lifecycle.label_state
label_etag = lifecycle.label_etag


def label_move(
    *,
    bundle: Bundle,
    name: str,
    actor: Actor,
    reason: str,
    version: BundleVersion | None = None,
    targets: Targets | None = None,
    allow_breaking: bool = False,
    compatibility: str | None = None,
    expected_revision: int | None = None,
    allow_retiring: bool = False,
    must_not_exist: bool = False,
) -> tuple[Label, bool]:
    """Point label `name` at `version`, or split it over `targets` (a percentage rollout),
    creating the label if needed; returns (label, created).

    Versions that leave every target start draining (or are drained at once, with no active
    session) in the same transaction when no other label still targets them; a target with
    weight 0 stays a target. A label that requires compatibility refuses a `major` target
    unless allow_breaking (lifecycle.compatibility_note); `compatibility` sets the label's
    policy ("none" or "backward"). `expected_revision` is If-Match: PreconditionFailed unless
    the label is still at that revision. A target whose model retires within
    MODEL_RETIREMENT_WARNING needs `allow_retiring` (409 model_retiring otherwise;
    lifecycle.retiring_notes);
    `must_not_exist` is If-None-Match: *: PreconditionFailed
    when the label exists (two people creating the same label: the second learns it, rather
    than moving what the first made)."""
    if compatibility is not None and compatibility not in Compatibility.values:
        raise InvalidContent(
            "Unknown compatibility.", {"compatibility": [f"One of {', '.join(Compatibility.values)}."]}
        )
    if not isinstance(name, str) or not re.fullmatch(LABEL_NAME_RE, name):
        raise InvalidContent("The label name is not valid.", {"label": [f"Must match {LABEL_NAME_RE}."]})
    reason = lifecycle.require_text("reason", reason)
    if (version is None) == (targets is None):
        raise InvalidContent("Give version or targets.", {"version": ["Give either version or targets."]})
    single: Targets = [(version, 100)] if version is not None else []
    wanted = lifecycle.targets_valid(bundle=bundle, targets=targets if targets is not None else single)
    require_bundle_scope(actor, bundle.name)
    for attempt in range(2):
        try:
            with transaction.atomic():
                label = lifecycle.label_lock(bundle=bundle, name=name)
                lifecycle.revision_check(label, expected_revision)
                if label is not None and must_not_exist:
                    raise PreconditionFailed(
                        f"The label {name!r} exists (If-None-Match: *).", {"current": label_state(label)}
                    )
                if label is None:
                    created = _label_create(
                        bundle=bundle,
                        name=name,
                        targets=wanted,
                        actor=actor,
                        reason=reason,
                        compatibility=compatibility,
                        allow_retiring=allow_retiring,
                    )
                    return created, True
                moved = label_move_locked(
                    label=label,
                    targets=wanted,
                    actor=actor,
                    reason=reason,
                    allow_breaking=allow_breaking,
                    compatibility=compatibility,
                    allow_retiring=allow_retiring,
                )
                return moved, False
        except IntegrityError:
            # Two first moves of a new label raced on its unique name; the loser retries as a move.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def label_move_locked(
    *,
    label: Label,
    targets: Targets,
    actor: Actor,
    reason: str,
    allow_breaking: bool = False,
    compatibility: str | None = None,
    approved_by: list[str] | None = None,
    allow_retiring: bool = False,
) -> Label:
    """The move of an existing label whose row the caller's transaction holds: label_move's, and
    an approved change request's (registry.changes, with its `approved_by`)."""
    lifecycle.check_may_move(label_name=label.name, protected=label.protected, actor=actor)
    policy_change = compatibility is not None and compatibility != label.compatibility
    if policy_change:
        # The policy is ops' (PATCH): a publisher's PUT may move the label but not lower the
        # rule every later move is judged by. Checked before the move, so nothing is half done.
        require_role(actor, Role.OPS, "Changing a label's compatibility policy")
    if not lifecycle.same_targets(label, targets):
        # Judged by the policy the label has now: a request cannot lower the policy
        # and slip a breaking move past it at once.
        label = lifecycle.label_apply_targets(
            label=label,
            targets=targets,
            actor=actor,
            reason=reason,
            allow_breaking=allow_breaking,
            approved_by=approved_by,
            allow_retiring=allow_retiring,
        )
    if policy_change:
        _policy_apply(label=label, changes={"compatibility": compatibility}, actor=actor, reason=reason)
    return label


# What PATCH .../labels/{label}/ may change, and how each field is checked.
POLICY_FIELDS = ("protected", "compatibility", "required_approvals", "required_checks")


def _protected_error(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false."


def _compatibility_error(value: Any) -> str | None:
    return None if value in Compatibility.values else f"One of {', '.join(Compatibility.values)}."


def _approvals_error(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= REQUIRED_APPROVALS_MAX:
        return f"An integer from 0 to {REQUIRED_APPROVALS_MAX}."
    return None


def _checks_error(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > REQUIRED_CHECKS_MAX:
        return f"A list of at most {REQUIRED_CHECKS_MAX} check names."
    if any(not isinstance(n, str) or not re.fullmatch(CHECK_NAME_RE, n) for n in value):
        return f"Check names must match {CHECK_NAME_RE}."
    if len(set(value)) != len(value):
        return "Each check name at most once."
    return None


# How each policy field is checked: a message for a bad value, None for a good one.
_POLICY_CHECKS = {
    "protected": _protected_error,
    "compatibility": _compatibility_error,
    "required_approvals": _approvals_error,
    "required_checks": _checks_error,
}


def _valid_policy(changes: dict[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {name: ["Unknown field."] for name in sorted(set(changes) - set(POLICY_FIELDS))}
    for name, check in _POLICY_CHECKS.items():
        message = check(changes[name]) if name in changes else None
        if message is not None:
            errors[name] = [message]
    if errors:
        raise InvalidContent("The label policy is not valid; see details.", errors)
    if "required_checks" in changes:
        changes = {**changes, "required_checks": sorted(changes["required_checks"])}
    return changes


def label_policy(label: Label) -> dict[str, Any]:
    return {name: getattr(label, name) for name in POLICY_FIELDS}


def label_policy_set(
    *,
    bundle: Bundle,
    name: str,
    changes: dict[str, Any],
    actor: Actor,
    reason: str,
    expected_revision: int | None = None,
) -> Label:
    """Change a label's policy (ops): whether it is protected, its compatibility rule, the
    checks a target must have passed. Recorded in the label's history (kind "policy", with who
    and why) and the audit log; the revision (ETag) moves. Setting what is already set changes
    nothing."""
    reason = lifecycle.require_text("reason", reason)
    require_role(actor, Role.OPS, "Changing a label's policy")
    require_bundle_scope(actor, bundle.name)
    changes = _valid_policy(dict(changes))
    with transaction.atomic():
        label = lifecycle.label_lock(bundle=bundle, name=name)
        if label is None:
            raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
        lifecycle.revision_check(label, expected_revision)
        _policy_apply(label=label, changes=changes, actor=actor, reason=reason)
        return label


def _policy_apply(*, label: Label, changes: dict[str, Any], actor: Actor, reason: str) -> None:
    """Apply valid policy `changes` to a label whose row the caller's transaction holds: one row
    in the label's history (kind "policy", with who and why), one audit event, and the revision
    (ETag) moves. The one way a policy changes, whether through PATCH or label PUT's
    `compatibility`. Setting what is already set changes nothing."""
    before = label_policy(label)
    changed = {k: v for k, v in changes.items() if before[k] != v}
    if not changed:
        return
    for key, value in changed.items():
        setattr(label, key, value)
    label.change_kind = "policy"
    label.move_note = "policy: " + "; ".join(f"{k} {before[k]!r} -> {v!r}" for k, v in changed.items())
    label.revision += 1
    label.updated_at = timezone.now()
    label.updated_by = actor.name
    label._change_reason = lifecycle.common.history_reason(reason)  # recorded by django-simple-history
    label.save()
    audit_record(
        actor=actor,
        action="label.policy_changed",
        target_type="label",
        target=f"{label.bundle.name}:{label.name}",
        reason=reason,
        data={"from": {k: before[k] for k in changed}, "to": changed},
    )


def _label_create(
    *,
    bundle: Bundle,
    name: str,
    targets: Targets,
    actor: Actor,
    reason: str,
    compatibility: str | None,
    allow_retiring: bool = False,
) -> Label:
    policy = lifecycle.new_label_policy(name, compatibility=compatibility)
    lifecycle.check_may_move(label_name=name, protected=policy.protected, actor=actor)
    locked = lifecycle.versions_lock(*(v.pk for v, _ in targets))
    joining = [lifecycle.check_targetable(locked[version.pk]) for version, _ in targets]
    notes = lifecycle.retiring_notes(label=Label(name=name), joining=joining, allow_retiring=allow_retiring)
    for version in joining:
        lifecycle.version_make_live(version=version)
    label = Label(
        bundle=bundle,
        name=name,
        version=locked[lifecycle.primary_of(targets).pk],
        targets=lifecycle.targets_out(targets),
        protected=policy.protected,
        compatibility=policy.compatibility,
        move_note="; ".join(notes),
        updated_at=timezone.now(),
        updated_by=actor.name,
    )
    label._change_reason = lifecycle.common.history_reason(reason)
    label.save()  # a concurrent first move of the same name fails here; label_move retries
    audit_record(
        actor=actor,
        action="label.created",
        target_type="label",
        target=f"{bundle.name}:{name}",
        reason=reason,
        data={"to_version": label.version.number, "targets": label_targets_out(label), "protected": policy.protected},
    )
    lifecycle.label_moved_emit(label=label, from_version=None, actor=actor, reason=reason)
    return label


def label_rollback(
    *,
    bundle: Bundle,
    name: str,
    to_version: BundleVersion | None,
    actor: Actor,
    reason: str,
    allow_breaking: bool = False,
    expected_revision: int | None = None,
    allow_retiring: bool = False,
) -> Label:
    """Move a label to `to_version` alone, or by default to the version it targeted before its
    current state (409 when there is none). A split label rolls back to its primary target
    before the split, so rolling back a ramp sends every new session to the old version.
    Ops only. Going back to a version this label targeted before is exempt from its
    compatibility policy; any other `to_version` is judged like a move. A version whose model
    retires soon gets the same question as a move (`allow_retiring`)."""
    reason = lifecycle.require_text("reason", reason)
    require_role(actor, Role.OPS, "Rolling back")
    require_bundle_scope(actor, bundle.name)
    with transaction.atomic():
        label = lifecycle.label_lock(bundle=bundle, name=name)
        if label is None:
            raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
        lifecycle.revision_check(label, expected_revision)
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
        if target.pk == label.version_id and not label.targets:
            raise Conflict(f"The label {name!r} already targets version {target.number}.")
        return lifecycle.label_apply_targets(
            label=label,
            targets=[(target, 100)],
            actor=actor,
            reason=reason,
            action="label.rolled_back",
            allow_breaking=allow_breaking,
            allow_retiring=allow_retiring,
        )


# Checks live in registry.checks; named here too, as the approvals are.
check_report = checks.check_report
check_record = checks.check_record
CHECK_REPORTERS = checks.CHECK_REPORTERS

# Approvals of a version's content (four eyes) live in registry.approvals; named here too.
approval_record = approvals.approval_record
approval_withdraw = approvals.approval_withdraw

# Revoking is a state transition of a version: it lives with the others in registry.lifecycle.
version_revoke = lifecycle.version_revoke
