"""The release lifecycle, in one place: row locks and their order, the version state
transitions (make live, release into draining, drain, revoke, pin at session start), the
rules of a label move (who may move, what a new label is created with, what a label's
compatibility policy allows) and the previews the admin and the API show before a write.

Services (registry.services, sessions_app.services) call these; nothing here is an entry
point of its own except the transitions that are whole services (version_drain,
version_revoke). Imports run one way: this module reads models and selectors and never
imports a tasks module (it enqueues by task name, see core.enqueue).

The locking protocol (PostgreSQL, READ COMMITTED), and why it holds:

* Lock order is label row, then version rows in ascending id. Session start takes
  label FOR SHARE then version FOR SHARE (version_pin); a label move takes label FOR UPDATE
  (label_lock) then the versions it leaves and reaches FOR UPDATE (versions_lock); a release
  (registry.releases) takes every label row it moves first, in ascending id, then all their
  versions in ascending id; a drain or a revoke takes only the version FOR UPDATE; a session
  end takes its session row, then the version FOR SHARE (to read its state, see
  sessions_app.services.session_end), and nothing that locks a version waits for a session
  row. No service takes them in another order, so none can wait on another in a cycle.
* A session's own (L3) skill cards come after its session row: a session end (and the sweep's
  expiry) locks the session rows, then deletes their cards; a card registration
  (skills.services.session_skill_register) locks the session row FOR NO KEY UPDATE, refuses
  an ended one, and only then locks the cards. (Registration used to lock the cards first and
  take the foreign key's share lock on the session at its INSERT: against an end holding the
  session and waiting for the cards, a cycle.) An end that waited for a registration deletes
  the cards in a second statement, whose fresh snapshot sees the card just committed.
* A session that starts while its label moves pins the old or the new target, never
  anything else: the label row lock makes the two serial, and a locking read in READ
  COMMITTED returns the newest committed row (so the starter sees the move it waited on).
* A version is never drained under an active session: session start holds the version
  FOR SHARE from its state check until its INSERT commits; the drain takes the version
  FOR UPDATE (which waits for that commit) and only then, in a *separate* statement with a
  fresh snapshot, looks for labels and active sessions. A single
  `UPDATE ... WHERE NOT EXISTS (active session)` is not enough: its subquery runs on the
  snapshot taken before it waited, so it misses the session that just committed
  (tests/test_races.py keeps that broken drain as a negative control). The session's
  foreign key alone does not help either: it takes FOR KEY SHARE, which does not conflict
  with the UPDATE of a non-key column such as `state`.
* The Django ORM has no FOR SHARE; session start uses raw SQL for it, deliberately, so
  that many sessions can start on one version at once (FOR UPDATE would serialise every
  session start of a bundle on its production version row).
* A session never starts on a drained version: start re-reads the state under the lock and
  refuses `drained`. Starting on an `unreleased` version takes FOR UPDATE instead, because
  it writes the state (to `draining`: pinned, no label) in the same transaction.
"""

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from audit.services import audit_record
from core import enqueue, events, instruments
from core.errors import ChecksRequired, Conflict, Forbidden, InvalidContent, NotFound, VersionRevoked
from core.limits import DEFAULT_LABEL, TEXT_MAX_CHARS
from registry import bundle_cache
from registry.canonical import normalise_content
from registry.contracts import Change, Diff, by_severity, check_content, diff_contents
from registry.models import Bundle, BundleVersion, Compatibility, Label, VersionState
from registry.selectors import checks_latest, label_targets
from sessions_app.models import Session

# The Celery task that drains a version (sessions_app.tasks); sent by name so that no service
# imports a tasks module (tasks import services, never the other way round).
VERSION_DRAIN_TASK = "sessions_app.tasks.version_drain_task"

# Labels created with these names are protected (only ops may move them) and require backward
# compatibility (see registry.contracts). Other new labels are neither, unless the move says so.
# That is the only place a name matters: afterwards every rule reads the label's own policy
# (protected, compatibility, required_checks), which ops change with label_policy_set.
PROTECTED_ON_CREATE = frozenset({"production"})
COMPATIBLE_ON_CREATE = frozenset({"production"})


def require_text(field: str, value: object, *, max_chars: int = TEXT_MAX_CHARS) -> str:
    """A required free-text field (a reason, a change message): a non-blank string."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidContent(f"A {field} is required.", {field: ["This field is required and may not be blank."]})
    if len(value) > max_chars:
        raise InvalidContent(f"The {field} is too long.", {field: [f"At most {max_chars} characters."]})
    return value


def content_of(version: BundleVersion) -> dict[str, Any]:
    """The content document a version stores (decoded from its canonical bytes)."""
    return json.loads(bytes(version.canonical))


# --- locks (in this order: label, then versions by ascending id) -------------------------------


def label_lock(*, bundle: Bundle, name: str) -> Label | None:
    """The label row FOR UPDATE (a move, a rollback, a policy change), or None."""
    return Label.objects.select_for_update(of=("self",)).filter(bundle=bundle, name=name).first()


def label_lock_shared(*, bundle: Bundle, name: str) -> tuple[int, list[dict[str, int]]] | None:
    """The label row FOR SHARE (session start); returns the id of the version it targets and
    its split (empty unless a percentage rollout), or None."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version_id, targets FROM registry_label WHERE bundle_id = %s AND name = %s FOR SHARE",
            [bundle.pk, name],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    targets = row[1] if isinstance(row[1], list) else json.loads(row[1] or "[]")
    return row[0], targets


def versions_lock(*ids: int) -> dict[int, BundleVersion]:
    """Version rows FOR UPDATE, by id. Ascending id order, the same in every service: two
    movers never wait on each other in a cycle."""
    wanted = sorted(set(ids))
    return {v.pk: v for v in BundleVersion.objects.select_for_update(of=("self",)).filter(pk__in=wanted).order_by("pk")}


def version_lock_shared(version_id: int) -> BundleVersion:
    """The version row FOR SHARE (session start); returns it with its state, number and hash
    (what the new session's answer shows, read in the same statement as the lock)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, number, content_hash, bundle_id FROM registry_bundleversion WHERE id = %s FOR SHARE",
            [version_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound(f"No version with id {version_id}.")
    state, number, content_hash, bundle_id = row
    return BundleVersion(id=version_id, bundle_id=bundle_id, number=number, content_hash=content_hash, state=state)


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


def label_target_ids(label: Label) -> list[int]:
    """Every version the label targets (weight 0 included)."""
    return [t["version_id"] for t in label.targets] if label.targets else [label.version_id]


# --- rules of a label move ---------------------------------------------------------------------


@dataclass(frozen=True)
class LabelPolicy:
    protected: bool
    compatibility: str  # a Compatibility value


def new_label_policy(name: str, *, compatibility: str | None = None) -> LabelPolicy:
    """What a label is created with: `production` is protected and requires backward
    compatibility; `compatibility`, when given, overrides the default policy."""
    if compatibility is None:
        compatibility = Compatibility.BACKWARD if name in COMPATIBLE_ON_CREATE else Compatibility.NONE
    return LabelPolicy(protected=name in PROTECTED_ON_CREATE, compatibility=compatibility)


def move_refusal(actor: Actor, *, label_name: str, protected: bool) -> str | None:
    """Why `actor` may not move (or create) a label, or None when it may."""
    if not actor.has_role(Role.PUBLISHER):
        return f"Moving a label needs the {Role.PUBLISHER} role."
    if protected and not actor.has_role(Role.OPS):
        return f"The label {label_name!r} is protected: only ops may move it."
    return None


def may_move(actor: Actor, *, protected: bool) -> bool:
    """Whether `actor` may move a label that is (or would be created) `protected`."""
    return move_refusal(actor, label_name="", protected=protected) is None


def label_is_protected(*, bundle: Bundle, name: str) -> bool:
    """Whether moving `name` needs ops: the existing label's flag, or for a new label the
    flag it would be created with."""
    protected = Label.objects.filter(bundle=bundle, name=name).values_list("protected", flat=True).first()
    return new_label_policy(name).protected if protected is None else protected


def check_may_move(*, label_name: str, protected: bool, actor: Actor) -> None:
    refusal = move_refusal(actor, label_name=label_name, protected=protected)
    if refusal is not None:
        raise Forbidden(refusal)


def check_targetable(version: BundleVersion) -> BundleVersion:
    """A (locked) version a label may point at: anything but revoked."""
    if version.state == VersionState.REVOKED:
        raise Conflict(f"Version {version.number} is revoked; a label cannot point at it.")
    return version


@dataclass(frozen=True)
class CompatibilityCheck:
    """What a label's compatibility policy makes of a move from `current` to a target:
    `required` when the label requires backward compatibility and the move changes its target;
    `rollback` when the target is a version this label targeted before (exempt: that state was
    already live under this label, and ops must be able to undo at once); `diff` the
    classification against the current target, most severe change first (None when there is
    nothing to compare, or the policy does not apply and nobody asked for it)."""

    required: bool
    rollback: bool
    diff: Diff | None

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.diff.changes if c.level == "major"] if self.diff else []

    @property
    def applies(self) -> bool:
        return self.required and not self.rollback

    @property
    def needs_override(self) -> bool:
        """The move is refused unless it says allow_breaking."""
        return self.applies and self.diff is not None and self.diff.level == "major"


def compatibility_check(
    *, label: Label | None, current: BundleVersion | None, target: BundleVersion, classify: bool = False
) -> CompatibilityCheck:
    """The policy of `label` (None: a label being created, which is not checked) applied to a
    move from `current` to `target`. The diff is computed only when the policy needs it, or
    when `classify` asks for it (a preview shows it whatever the policy)."""
    if label is None or current is None or current.pk == target.pk:
        return CompatibilityCheck(required=False, rollback=False, diff=None)
    required = label.compatibility == Compatibility.BACKWARD
    if not required and not classify:
        return CompatibilityCheck(required=False, rollback=False, diff=None)
    rollback = label.history.filter(version_id=target.pk).exists()
    if rollback and not classify:
        return CompatibilityCheck(required=required, rollback=True, diff=None)
    diff = by_severity(diff_contents(content_of(current), content_of(target)))
    return CompatibilityCheck(required=required, rollback=rollback, diff=diff)


def compatibility_note(*, label: Label, current: BundleVersion, target: BundleVersion, allow_breaking: bool) -> str:
    """Apply the label's compatibility policy to a move; returns the note the history keeps,
    or raises Conflict (with the breaking changes) for a major move without allow_breaking."""
    check = compatibility_check(label=label, current=current, target=target)
    if not check.required:
        return ""
    if check.rollback:
        return f"compatibility check not applied: version {target.number} was this label's target before (rollback)"
    assert check.diff is not None  # required and not a rollback: compatibility_check classified
    if not check.needs_override:
        return f"compatibility check passed: {check.diff.level} against version {current.number}"
    breaking = [asdict(change) for change in check.breaking]
    if not allow_breaking:
        raise Conflict(
            f"Version {target.number} breaks agents on {label.name!r} (major against version {current.number}); "
            'fix it, or send "allow_breaking": true with a reason.',
            {"level": "major", "changes": breaking},
        )
    return f"breaking change allowed (allow_breaking): {len(breaking)} major change(s) against version {current.number}"


@dataclass(frozen=True)
class ChecksVerdict:
    """What a label's required checks make of `target`: the names it requires, those never
    reported for the target's content hash, those whose latest report is not a success. A
    version the label targeted before passes whatever its checks say (a rollback must never
    wait for CI)."""

    version: int
    content_hash: str
    required: list[str]
    missing: list[str]
    failing: list[dict[str, str]]
    rollback: bool

    @property
    def passes(self) -> bool:
        return self.rollback or not (self.missing or self.failing)

    def out(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "required": self.required,
            "missing": self.missing,
            "failing": self.failing,
            "rollback": self.rollback,
            "passes": self.passes,
        }


def checks_verdict(*, label: Label, target: BundleVersion) -> ChecksVerdict:
    required = list(label.required_checks or [])
    if not required:
        return ChecksVerdict(target.number, target.content_hash, [], [], [], False)
    rollback = label.history.filter(version_id=target.pk).exists()
    latest = {c.name: c.status for c in checks_latest(bundle_id=target.bundle_id, content_hash=target.content_hash)}
    missing = [name for name in required if name not in latest]
    failing = [{"name": n, "status": latest[n]} for n in required if n in latest and latest[n] != "success"]
    return ChecksVerdict(target.number, target.content_hash, required, missing, failing, rollback)


def require_checks(*, label: Label, target: BundleVersion) -> None:
    """ChecksRequired (409 checks_required) unless `target` passes the label's required checks."""
    verdict = checks_verdict(label=label, target=target)
    if verdict.passes:
        return
    parts = [f"never reported: {', '.join(verdict.missing)}"] if verdict.missing else []
    parts += [f"{f['name']} is {f['status']}" for f in verdict.failing]
    raise ChecksRequired(
        f"Version {target.number} has not passed the checks {label.name!r} requires ({'; '.join(parts)}).",
        {
            "version": target.number,
            "content_hash": target.content_hash,
            "missing": verdict.missing,
            "failing": verdict.failing,
        },
    )


# --- previews (read-only, unlocked: the state as it is now) ------------------------------------


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
        sessions = Session.objects.active_on(current.pk)
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
    active = 0 if version.state == VersionState.REVOKED else Session.objects.active_on(version.pk)
    return RevokePreview(labels=labels, active_sessions=active)


# --- version state transitions (the caller holds the version row FOR UPDATE unless noted) ------


def version_make_live(*, version: BundleVersion) -> None:
    """A label now targets `version`."""
    if version.state != VersionState.LIVE:
        version.state = VersionState.LIVE
        version.draining_since = None
        version.drained_at = None
        version.save(update_fields=["state", "draining_since", "drained_at"])


def version_release(*, version: BundleVersion) -> None:
    """A label has left `version` (the label already saved): if no label targets it any more
    it drains, at once when no session is pinned to it."""
    if version.state != VersionState.LIVE or Label.objects.targeting(version.pk).exists():
        return
    version.state = VersionState.DRAINING
    version.draining_since = timezone.now()
    version.save(update_fields=["state", "draining_since"])
    bundle_name = Bundle.objects.values_list("name", flat=True).get(pk=version.bundle_id)
    events.emit("version.draining", bundle=bundle_name, version=version.number, content_hash=version.content_hash)
    if not Session.objects.active().pinned_to(version).exists():
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
    # Lock first, then check in separate statements (see the module docstring).
    version = BundleVersion.objects.select_for_update(of=("self",)).filter(pk=version_id).first()
    if version is None or version.state != VersionState.DRAINING:
        return False
    if Label.objects.targeting(version.pk).exists():
        return False
    if Session.objects.active().pinned_to(version).exists():
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
    *, bundle: Bundle, label: str | None, version: BundleVersion | None, routing_key: str = ""
) -> BundleVersion:
    """Lock and return the version a new session pins to: what `label` (default production)
    targets, or `version`. On a label with a percentage split the routing key (the session's
    own id when the caller has none) picks the target: that choice is the pin, so later weight
    changes never move the session. Call inside the session's transaction: the FOR SHARE locks
    it takes are what keep a drain from passing the INSERT that follows."""
    if version is None:
        return versions_pin_on_label(bundle=bundle, label=label, routing_keys=[routing_key])[0]

    if version.state == VersionState.UNRELEASED:
        # Pinning writes the state, so take the exclusive lock, then re-read.
        version = BundleVersion.objects.select_for_update(of=("self",)).get(pk=version.pk)
        if version.state == VersionState.UNRELEASED:
            version.state = VersionState.DRAINING
            version.draining_since = timezone.now()
            version.save(update_fields=["state", "draining_since"])
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
    return version


def versions_pin_on_label(*, bundle: Bundle, label: str | None, routing_keys: list[str]) -> list[BundleVersion]:
    """version_pin on a label for several new sessions at once (one per routing key, in order):
    the label row FOR SHARE once, then the versions they pin FOR SHARE in ascending id (the
    lock order above). Call inside the sessions' transaction."""
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
