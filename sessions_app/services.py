"""Sessions, pinning and draining: every write to a session or to a version's lifecycle state.

The locking protocol (PostgreSQL, READ COMMITTED), and why it holds:

* Lock order is label row, then version rows in ascending id. Session start takes
  label FOR SHARE then version FOR SHARE; a label move takes label FOR UPDATE then its
  two versions FOR UPDATE; a drain or a revoke takes only the version FOR UPDATE.
  No service takes them in another order, so none can wait on another in a cycle.
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

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from audit.services import audit_record
from registry import bundle_cache, events
from registry import variables as content_variables
from registry.errors import Conflict, Forbidden, InvalidContent, NotFound, SessionEnded, VersionRevoked
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.parsed_content import content_document
from registry.selectors import label_targets
from sessions_app import tasks
from sessions_app.models import Session, SessionStatus

logger = logging.getLogger(__name__)

SWEEP_LOCK_ID = 0x5E551011  # pg advisory lock key: one sweep at a time, whatever runs beat


# --- version lifecycle (callers hold the version row FOR UPDATE) ---------------------------


def version_make_live(*, version: BundleVersion) -> None:
    """A label now targets `version` (locked FOR UPDATE by the caller)."""
    if version.state != VersionState.LIVE:
        version.state = VersionState.LIVE
        version.draining_since = None
        version.drained_at = None
        version.save(update_fields=["state", "draining_since", "drained_at"])


def version_release(*, version: BundleVersion) -> None:
    """A label has left `version` (locked FOR UPDATE by the caller, the label already saved):
    if no label targets it any more it drains, at once when no session is pinned to it."""
    if version.state != VersionState.LIVE or Label.objects.filter(version=version).exists():
        return
    version.state = VersionState.DRAINING
    version.draining_since = timezone.now()
    version.save(update_fields=["state", "draining_since"])
    if not Session.objects.active().pinned_to(version).exists():
        _mark_drained(version)
    else:
        # A session counted above may end before we commit; its own drain request then saw
        # this version still live and skipped (see _request_drain), so ask once more after commit.
        version_id = version.pk
        transaction.on_commit(lambda: tasks.enqueue_version_drain(version_id))


def _mark_drained(version: BundleVersion) -> None:
    version.state = VersionState.DRAINED
    version.drained_at = timezone.now()
    version.save(update_fields=["state", "drained_at"])
    digest, number, bundle_id = version.content_hash, version.number, version.bundle_id
    bundle_name = Bundle.objects.values_list("name", flat=True).get(pk=bundle_id)

    def drain_actions() -> None:
        # After commit: a rolled-back drain must neither drop the cache nor announce itself.
        bundle_cache.drop(digest)
        events.emit("version.drained", bundle=bundle_name, version=number, content_hash=digest)

    transaction.on_commit(drain_actions)


@transaction.atomic
def version_drain(*, version_id: int) -> bool:
    """Mark a draining version drained if no label targets it and no active session is pinned
    to it. Idempotent and safe to run concurrently; returns whether this call drained it."""
    # Unlocked fast path: session ends on a live version (the common case) must not take the
    # hot version row FOR UPDATE. Safe, because a version only becomes draining in a label
    # move, which asks for its own drain after it commits.
    if not BundleVersion.objects.filter(pk=version_id, state=VersionState.DRAINING).exists():
        return False
    # Lock first, then check in separate statements (see the module docstring).
    version = BundleVersion.objects.select_for_update(of=("self",)).filter(pk=version_id).first()
    if version is None or version.state != VersionState.DRAINING:
        return False
    if Label.objects.filter(version=version).exists():
        return False
    if Session.objects.active().pinned_to(version).exists():
        return False
    _mark_drained(version)
    return True


# --- sessions -------------------------------------------------------------------------------


def _lock_label_shared(*, bundle: Bundle, name: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version_id FROM registry_label WHERE bundle_id = %s AND name = %s FOR SHARE",
            [bundle.pk, name],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _lock_version_shared(version_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM registry_bundleversion WHERE id = %s FOR SHARE", [version_id])
        return cursor.fetchone()[0]


def _validate_ttl(ttl_seconds: Any) -> int:
    if ttl_seconds is None:
        return settings.SESSION_DEFAULT_TTL
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
        raise InvalidContent("ttl_seconds must be an integer.", {"ttl_seconds": ["A whole number of seconds."]})
    if not 1 <= ttl_seconds <= settings.SESSION_MAX_TTL:
        raise InvalidContent(
            "ttl_seconds is out of range.", {"ttl_seconds": [f"Must be 1 to {settings.SESSION_MAX_TTL}."]}
        )
    return ttl_seconds


def _pin_version_id(*, bundle: Bundle, label: str | None, version: BundleVersion | None) -> int:
    """Lock and return the version a new session pins to; call inside the session's transaction."""
    if version is None:
        version_id = _lock_label_shared(bundle=bundle, name=label or "production")
        if version_id is None:
            raise NotFound(f"Bundle {bundle.name!r} has no label {label or 'production'!r}.")
        state = _lock_version_shared(version_id)
        if state != VersionState.LIVE:
            # A label targets it and we hold the label: only a broken invariant gets here.
            raise RuntimeError(f"version {version_id} is targeted by a label but is {state}")
        return version_id

    if version.state == VersionState.UNRELEASED:
        # Pinning writes the state, so take the exclusive lock, then re-read.
        version = BundleVersion.objects.select_for_update(of=("self",)).get(pk=version.pk)
        if version.state == VersionState.UNRELEASED:
            version.state = VersionState.DRAINING
            version.draining_since = timezone.now()
            version.save(update_fields=["state", "draining_since"])
            return version.pk
        state = version.state
    else:
        state = _lock_version_shared(version.pk)
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
    return version.pk


def session_start(
    *,
    bundle: Bundle,
    actor: Actor,
    label: str | None = None,
    version: BundleVersion | None = None,
    external_id: Any = None,
    ttl_seconds: Any = None,
    variables: Any = None,
) -> tuple[Session, bool]:
    """Start a session pinned to what `label` (default production) targets now, or to `version`.

    `variables` are the session-scoped values, checked against what the pinned version
    declares (400 naming each wrong variable). Returns (session, created). The same
    external_id from the same key returns the session it started before (created=False)."""
    if label is not None and version is not None:
        raise InvalidContent("Give label or version, not both.", {"label": ["Not allowed together with version."]})
    if version is not None and version.bundle_id != bundle.pk:
        raise NotFound("That version does not belong to this bundle.")
    if external_id is not None and (not isinstance(external_id, str) or not 1 <= len(external_id) <= 200):
        raise InvalidContent("external_id is not valid.", {"external_id": ["A string of 1 to 200 characters."]})
    ttl = _validate_ttl(ttl_seconds)

    if external_id is not None and actor.api_key_id is not None:
        existing = _existing_by_external_id(actor=actor, external_id=external_id, bundle=bundle)
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            version_id = _pin_version_id(bundle=bundle, label=label, version=version)
            session_variables = _session_variables(version_id=version_id, given=variables)
            now = timezone.now()
            session = Session.objects.create(
                bundle=bundle,
                version_id=version_id,
                label=label if version is not None else (label or "production"),
                api_key_id=actor.api_key_id,
                external_id=external_id,
                ttl_seconds=ttl,
                started_at=now,
                last_seen_at=now,
                expires_at=now + timedelta(seconds=ttl),
                variables=session_variables,
            )
    except IntegrityError:
        # The same external_id raced in from the same key: the other insert won; return it.
        existing = _existing_by_external_id(actor=actor, external_id=external_id, bundle=bundle)
        if existing is None:
            raise
        return existing, False
    return session, True


def _session_variables(*, version_id: int, given: Any) -> dict[str, Any]:
    # Checked only once the version is pinned: which declarations apply depends on the label's
    # target at this instant. A refusal rolls back the pin (and any state it wrote) with it.
    content_hash = BundleVersion.objects.values_list("content_hash", flat=True).get(pk=version_id)
    declared = content_document(version_id=version_id, content_hash=content_hash).get("variables")
    try:
        return content_variables.resolve(declared, given, scope="session")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None


def _existing_by_external_id(*, actor: Actor, external_id: str, bundle: Bundle) -> Session | None:
    existing = Session.objects.filter(api_key_id=actor.api_key_id, external_id=external_id).first()
    if existing is not None and existing.bundle_id != bundle.pk:
        raise Conflict(
            "This external_id already names a session on another bundle.",
            {"external_id": [external_id], "bundle": [existing.bundle.name]},
        )
    return existing


def session_end(*, session: Session, actor: Actor) -> Session:
    """End a session; ending an ended or expired session changes nothing."""
    _check_owner(session=session, actor=actor)
    with transaction.atomic():
        ended = Session.objects.filter(pk=session.pk, status=SessionStatus.ACTIVE).update(
            status=SessionStatus.ENDED, ended_at=timezone.now()
        )
        if ended:
            version_id = session.version_id
            transaction.on_commit(lambda: _request_drain(version_id))
            if actor.api_key_id is None or session.api_key_id != actor.api_key_id:
                audit_record(
                    actor=actor,
                    action="session.ended_by_ops",
                    target_type="session",
                    target=str(session.pk),
                    data={"bundle_id": session.bundle_id, "version_id": version_id},
                )
    session.refresh_from_db()
    return session


def _request_drain(version_id: int) -> None:
    """After a session ended or expired: ask a worker to drain its version if it is draining.

    Read after our commit, so a label move that committed earlier shows as `draining`; one that
    commits later saw our session as active and enqueues its own drain after it commits."""
    if BundleVersion.objects.filter(pk=version_id, state=VersionState.DRAINING).exists():
        tasks.enqueue_version_drain(version_id)


def _check_owner(*, session: Session, actor: Actor) -> None:
    # Ownership needs a key on both sides: two keyless actors (people in the admin) share nothing.
    owns = actor.api_key_id is not None and session.api_key_id == actor.api_key_id
    if not owns and not actor.has_role(Role.OPS):
        raise Forbidden("Only the key that started a session, or ops, may change it.")


def session_expire_lapsed(*, session_ids: list[Any] | None = None, now: datetime | None = None) -> int:
    """Expire active sessions whose lease ran out (all of them, or only `session_ids`)
    and ask for a drain check of their versions. Returns how many expired."""
    now = now or timezone.now()
    with transaction.atomic():
        lapsed = Session.objects.active().filter(expires_at__lte=now)
        if session_ids is not None:
            lapsed = lapsed.filter(pk__in=session_ids)
        # Re-checked row by row under the row lock (READ COMMITTED), so a renewal that
        # commits first wins and the session stays active.
        version_ids = set(lapsed.values_list("version_id", flat=True))
        count = lapsed.update(status=SessionStatus.EXPIRED, ended_at=now)
        for version_id in version_ids:
            transaction.on_commit(lambda v=version_id: _request_drain(v))
    return count


def session_renew(*, session: Session, force: bool = False) -> Session:
    """Renew the lease of an active session (raises SessionEnded otherwise).

    A fetch (force=False) writes only once the lease is a quarter-TTL old: after any fetch
    the lease then still runs at least 3/4 TTL, so an agent fetching at least every TTL/2
    never expires, and the hot path skips the write on most calls."""
    now = timezone.now()
    if session.status != SessionStatus.ACTIVE:
        raise SessionEnded(f"Session {session.pk} is {session.status}; start a new session.")
    if session.expires_at <= now:
        session_expire_lapsed(session_ids=[session.pk], now=now)
        raise SessionEnded(f"Session {session.pk} expired; start a new session.")
    renew_after = timedelta(seconds=session.ttl_seconds * settings.SESSION_RENEW_FRACTION)
    if force or now - session.last_seen_at >= renew_after:
        expires = now + timedelta(seconds=session.ttl_seconds)
        updated = Session.objects.filter(pk=session.pk, status=SessionStatus.ACTIVE).update(
            last_seen_at=now, expires_at=expires
        )
        if not updated:
            raise SessionEnded(f"Session {session.pk} has ended; start a new session.")
        session.last_seen_at, session.expires_at = now, expires
    return session


def sessions_sweep() -> dict[str, int] | None:
    """The periodic backstop: expire lapsed sessions, then drain every draining version that
    has nothing pinned. Holds a PostgreSQL advisory lock for its whole run so that two beats
    (or a slow sweep overlapping the next) never run at once; returns None when another holds it.
    Each step is idempotent anyway: the lock saves work, correctness does not depend on it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SWEEP_LOCK_ID])
        if not cursor.fetchone()[0]:
            return None
    try:
        expired = session_expire_lapsed()
        draining = list(BundleVersion.objects.filter(state=VersionState.DRAINING).values_list("pk", flat=True))
        # Each drain in its own transaction: one busy version must not hold the others' locks.
        drained = sum(version_drain(version_id=version_id) for version_id in draining)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SWEEP_LOCK_ID])
    return {"expired": expired, "drained": drained}
