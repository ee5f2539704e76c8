"""The state transitions of a version (make live, release into draining, drain, revoke, pin at
session start) and the percentage-rollout arithmetic that picks the pin. The caller holds the
version row FOR UPDATE unless a function says it takes its own lock; the order of the locks is
registry.lifecycle.locks'."""

import hashlib

from django.db import transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from audit.services import audit_record
from core import enqueue, events, instruments
from core.errors import Conflict, NotFound, VersionRevoked
from core.limits import DEFAULT_LABEL
from registry import bundle_cache, pins
from registry.lifecycle.common import require_text
from registry.lifecycle.locks import label_lock_shared, version_lock_shared, versions_lock
from registry.lifecycle.tools import tools_settle_after_commit
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.selectors import label_targets, model_retired_error, retired_model

# The Celery task that drains a version (sessions_app.tasks); sent by name so that no service
# imports a tasks module (tasks import services, never the other way round).
VERSION_DRAIN_TASK = "sessions_app.tasks.version_drain_task"


# --- percentage rollouts -----------------------------------------------------------------------


def routing_bucket(*, bundle_name: str, label_name: str, routing_key: str) -> int:
    """0..99, a stable hash of who is routed: the same routing key on the same label lands in the
    same bucket in every session and every process (not Python's per-process hash())."""
    digest = hashlib.sha256(f"{bundle_name}\x00{label_name}\x00{routing_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def target_for_bucket(targets: list[dict[str, int]], bucket: int) -> int:
    """The version id whose slice of 0..99 holds `bucket`. Slices follow version number order,
    so raising the newest version's weight only moves people from older versions onto it."""
    edge = 0
    for target in sorted(targets, key=lambda t: t["number"]):
        edge += target["weight"]
        if bucket < edge:
            return target["version_id"]
    raise RuntimeError(f"weights of {targets} do not cover bucket {bucket}")


# --- version state transitions (the caller holds the version row FOR UPDATE unless noted) ------


def version_make_live(*, version: BundleVersion) -> None:
    """A label now targets `version`."""
    if version.state != VersionState.LIVE:
        version.state = VersionState.LIVE
        version.draining_since = None
        version.drained_at = None
        version.save(update_fields=["state", "draining_since", "drained_at"])
        tools_settle_after_commit([version.pk])


def version_release(*, version: BundleVersion) -> None:
    """A label has left `version` (the label already saved): if no label targets it any more
    it drains, at once when no session is pinned to it."""
    if version.state != VersionState.LIVE or Label.objects.targeting(version.pk).exists():
        return
    version.state = VersionState.DRAINING
    version.draining_since = timezone.now()
    version.save(update_fields=["state", "draining_since"])
    tools_settle_after_commit([version.pk])
    bundle_name = Bundle.objects.values_list("name", flat=True).get(pk=version.bundle_id)
    events.emit("version.draining", bundle=bundle_name, version=version.number, content_hash=version.content_hash)
    if not pins.any_active(version.pk):
        _mark_drained(version)
    else:
        # A session counted above may expire before we commit; the sweep's drain request
        # then saw this version still live and skipped (see version_drain_request), so ask
        # once more after commit. (An end cannot slip by: it reads the state under the
        # version's share lock, see sessions_app.services.session_end.)
        version_id = version.pk
        transaction.on_commit(lambda: enqueue_version_drain(version_id))


def _mark_drained(version: BundleVersion) -> None:
    version.state = VersionState.DRAINED
    version.drained_at = timezone.now()
    version.save(update_fields=["state", "drained_at"])
    # The same worker, right after this commit: a tool whose last carrier this was drains
    # within the version drain's timing (registry.lifecycle.tools).
    tools_settle_after_commit([version.pk])
    digest, number, bundle_id = version.content_hash, version.number, version.bundle_id
    bundle_name = Bundle.objects.values_list("name", flat=True).get(pk=bundle_id)
    events.emit("version.drained", bundle=bundle_name, version=number, content_hash=digest)
    waited = (version.drained_at - version.draining_since).total_seconds() if version.draining_since else None

    def drain_actions() -> None:
        # After commit: a rolled-back drain must not drop the cache or count itself.
        bundle_cache.drop(digest)
        instruments.version_drained(bundle=bundle_name, seconds=waited)

    transaction.on_commit(drain_actions)


@transaction.atomic
def version_drain(*, version_id: int) -> bool:
    """Mark a draining version drained if no label targets it and no active session is pinned
    to it. Idempotent and safe to run concurrently; returns whether this call drained it.
    Takes its own lock."""
    # Unlocked fast path: session ends on a live version (the common case) must not take the
    # hot version row FOR UPDATE. Safe, because a version only becomes draining in a label
    # move, which asks for its own drain after it commits.
    if not BundleVersion.objects.filter(pk=version_id, state=VersionState.DRAINING).exists():
        return False
    # Lock first, then check in separate statements (see registry.lifecycle.locks).
    version = BundleVersion.objects.select_for_update(of=("self",)).filter(pk=version_id).first()
    if version is None or version.state != VersionState.DRAINING:
        return False
    if Label.objects.targeting(version.pk).exists():
        return False
    if pins.any_active(version.pk):
        return False
    _mark_drained(version)
    return True


def enqueue_version_drain(version_id: int) -> None:
    """Ask a worker to check `version_id`; called after commit. Never raises (see core.enqueue):
    if the broker is away the periodic sweep drains the version later."""
    enqueue.send(VERSION_DRAIN_TASK, what=f"the drain of version {version_id}", version_id=version_id)


def version_drain_request(version_id: int) -> None:
    """After sessions expired (after commit): ask a worker to drain their version if it is
    draining. Read after our commit, so a label move that committed earlier shows as
    `draining`; one that commits later saw our sessions as active and enqueues its own drain
    after it commits. (A session end reads the state in its own statement, under a lock.)"""
    if BundleVersion.objects.filter(pk=version_id, state=VersionState.DRAINING).exists():
        enqueue_version_drain(version_id)


def version_pin(
    *,
    bundle: Bundle,
    label: str | None,
    version: BundleVersion | None,
    routing_key: str = "",
    evaluation: bool = False,
) -> BundleVersion:
    """Lock and return the version a new session pins to: what `label` (default production)
    targets, or `version`. On a label with a percentage split the routing key (the session's
    own id when the caller has none) picks the target: that choice is the pin, so later weight
    changes never move the session. Call inside the session's transaction: the FOR SHARE locks
    it takes are what keep a drain from passing the INSERT that follows.

    `evaluation`: the session is an evaluation run's (docs/evals.md#evaluating-an-unreleased-version).
    It leaves an unreleased version unreleased: a candidate is tried before any release, and
    the drain is the promise made for what was released (or served sessions by number), so a
    try must not use it up. The share lock still orders it against a label move or a revoke."""
    if version is None:
        return versions_pin_on_label(bundle=bundle, label=label, routing_keys=[routing_key])[0]

    if version.state == VersionState.UNRELEASED and not evaluation:
        # Pinning writes the state, so take the exclusive lock, then re-read.
        version = BundleVersion.objects.select_for_update(of=("self",)).get(pk=version.pk)
        if version.state == VersionState.UNRELEASED:
            require_model_live(bundle=bundle, version=version)
            version.state = VersionState.DRAINING
            version.draining_since = timezone.now()
            version.save(update_fields=["state", "draining_since"])
            tools_settle_after_commit([version.pk])
            return version
        state = version.state
    else:
        state = version_lock_shared(version.pk).state
    if state == VersionState.DRAINED:
        raise Conflict(
            f"Version {version.number} is drained: its tool backends may be gone. Start on a label instead.",
            {"labels": label_targets(bundle.pk)},
        )
    if state == VersionState.REVOKED:
        raise VersionRevoked(
            f"Version {version.number} was revoked; start a session on a label instead.",
            {"labels": label_targets(bundle.pk)},
        )
    require_model_live(bundle=bundle, version=version)
    return version


def require_model_live(*, bundle: Bundle, version: BundleVersion) -> None:
    """409 model_retired, with the labels' current targets, when a new session would pin a
    version whose model has retired: the agent fails at its start, not mid-conversation."""
    info = retired_model(version)
    if info is not None:
        replacement = f" (replacement: {info.replacement})" if info.replacement else ""
        raise model_retired_error(
            info=info,
            message=(
                f"Version {version.number} of {bundle.name!r} uses {info.name}, retired on "
                f"{info.retires_at}{replacement}; start on another label's target or migrate the version."
            ),
            status=409,
            labels=label_targets(bundle.pk),
        )


def versions_pin_on_label(*, bundle: Bundle, label: str | None, routing_keys: list[str]) -> list[BundleVersion]:
    """version_pin on a label for several new sessions at once (one per routing key, in order):
    the label row FOR SHARE once, then the versions they pin FOR SHARE in ascending id (the
    lock order of registry.lifecycle.locks). Call inside the sessions' transaction."""
    name = label or DEFAULT_LABEL
    found = label_lock_shared(bundle=bundle, name=name)
    if found is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
    version_id, targets = found
    ids = [
        target_for_bucket(targets, routing_bucket(bundle_name=bundle.name, label_name=name, routing_key=key))
        if targets
        else version_id
        for key in routing_keys
    ]
    pinned = {vid: version_lock_shared(vid) for vid in sorted(set(ids))}
    for vid, locked in pinned.items():
        if locked.state != VersionState.LIVE:
            # A label targets it and we hold the label: only a broken invariant gets here.
            raise RuntimeError(f"version {vid} is targeted by a label but is {locked.state}")
        require_model_live(bundle=bundle, version=locked)
    return [pinned[vid] for vid in ids]


@transaction.atomic
def version_revoke(*, version: BundleVersion, actor: Actor, reason: str) -> BundleVersion:
    """Take a version out of service (ops, within the key's scope). Its sessions then get
    410 version_revoked. Refused while a label targets it. Takes its own lock."""
    reason = require_text("reason", reason)
    require_role(actor, Role.OPS, "Revoking a version")
    bundle_name = Bundle.objects.values_list("name", flat=True).get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle_name)
    version = versions_lock(version.pk)[version.pk]
    if version.state == VersionState.REVOKED:
        return version
    labels = list(Label.objects.targeting(version.pk).values_list("name", flat=True))
    if labels:
        raise Conflict(
            f"Version {version.number} is targeted by {', '.join(labels)}; move those labels first.",
            {"labels": labels},
        )
    version.state = VersionState.REVOKED
    version.revoked_at = timezone.now()
    version.revoke_reason = reason
    version.save(update_fields=["state", "revoked_at", "revoke_reason"])
    tools_settle_after_commit([version.pk])
    digest, number = version.content_hash, version.number
    events.emit("version.revoked", bundle=bundle_name, version=number, content_hash=digest, by=actor.name)
    audit_record(
        actor=actor,
        action="version.revoked",
        target_type="version",
        target=f"{bundle_name}@{number}",
        reason=reason,
        data={"number": number, "content_hash": digest},
    )

    transaction.on_commit(lambda: bundle_cache.drop(digest))
    return version
