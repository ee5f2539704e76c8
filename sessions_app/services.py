"""Sessions: start (pinned to one version), lease renewal, end, expiry and the sweep.

Every lock a session start takes, and why session start, label moves and drains are safe
against each other, is in registry.lifecycle (version_pin and the module docstring there)."""

import logging
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope
from audit.services import audit_record
from core import events, instruments
from core.errors import Conflict, Forbidden, InvalidContent, NotFound, SessionEnded
from core.ids import uuid7
from core.limits import DEFAULT_LABEL, EXTERNAL_ID_MAX, TTL_MIN_SECONDS
from registry import guard, lifecycle
from registry import variables as content_variables
from registry.lifecycle import pin_policy
from registry.models import Bundle, BundleVersion, VersionState
from registry.parsed_content import content_document
from sessions_app import hooks
from sessions_app.models import Session, SessionStatus
from sessions_app.selectors import (
    PINNED_COLUMNS,
    pinned_row,
    require_session_role,
    session_for_fetch,
    session_noted,
    touch_due,
)

logger = logging.getLogger(__name__)


def _validate_ttl(ttl_seconds: object) -> int:
    if ttl_seconds is None:
        return settings.SESSION_DEFAULT_TTL
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
        raise InvalidContent("ttl_seconds must be an integer.", {"ttl_seconds": ["A whole number of seconds."]})
    if not TTL_MIN_SECONDS <= ttl_seconds <= settings.SESSION_MAX_TTL:
        raise InvalidContent(
            "ttl_seconds is out of range.",
            {"ttl_seconds": [f"Must be {TTL_MIN_SECONDS} to {settings.SESSION_MAX_TTL}."]},
        )
    return ttl_seconds


def session_start(
    *,
    bundle: Bundle,
    actor: Actor,
    label: str | None = None,
    version: BundleVersion | None = None,
    external_id: str | None = None,
    ttl_seconds: int | None = None,
    variables: dict[str, Any] | None = None,
    routing_key: str | None = None,
    evaluation: bool = False,
) -> tuple[Session, bool]:
    """Start a session pinned to what `label` (default production) targets now, or to `version`
    (`evaluation`: an evaluation run's, which leaves an unreleased version unreleased: version_pin).

    `variables` are the session-scoped values, checked against what the pinned version
    declares (400 naming each wrong variable). Returns (session, created). The same
    external_id from the same key returns the session it started before (created=False).
    The bundle must be within the key's scope, and the key's role one that holds sessions
    (403 for a `ci` key)."""
    pin = _start_checked(
        bundle=bundle, actor=actor, label=label, version=version, external_id=external_id, routing_key=routing_key
    )
    if evaluation and version is None:  # only a pin by number is a candidate's try (after the 403s)
        raise InvalidContent("evaluation applies to a session pinned by number.", {"evaluation": ["Give version."]})
    ttl = _validate_ttl(ttl_seconds)
    session_id = uuid7()

    if external_id is not None and actor.api_key_id is not None:
        existing = _existing_by_external_id(actor=actor, external_id=external_id, bundle=bundle)
        if existing is not None:
            session_noted(existing)
            return existing, False
    try:
        with transaction.atomic():
            key = routing_key or str(session_id)
            pinned = lifecycle.version_pin(
                bundle=bundle, label=label, version=version, routing_key=key, evaluation=evaluation
            )
            session_variables = _session_variables(version=pinned, given=variables)
            session = _new_session(
                session_id=session_id,
                routing_key=routing_key,
                bundle=bundle,
                version=pinned,
                label=label if version is not None else (label or DEFAULT_LABEL),
                actor=actor,
                external_id=external_id,
                ttl=ttl,
                variables=session_variables,
            )
            _insert(session)
            if pin is not None:  # every pin by number, in the transaction that makes it
                _pin_audited(session=session, pin=pin, actor=actor, evaluation=evaluation)
    except IntegrityError:
        # The same external_id raced in from the same key: the other insert won; return it.
        if external_id is None:
            raise
        existing = _existing_by_external_id(actor=actor, external_id=external_id, bundle=bundle)
        if existing is None:
            raise
        return existing, False
    instruments.session_event(event="started")
    instruments.sessions_started([session.version_id])
    session_noted(session)
    return session, True


def _start_checked(
    *,
    bundle: Bundle,
    actor: Actor,
    label: str | None,
    version: BundleVersion | None,
    external_id: str | None,
    routing_key: str | None,
) -> pin_policy.PinVerdict | None:
    """session_start's checks before anything is read or written, in the order a refusal must
    come: the role (403), the scope (404), the fields (400), then the pin by number (403
    pin_not_allowed), whose verdict is returned for the audit record (None: a start on a label)."""
    require_session_role(actor)
    require_bundle_scope(actor, bundle.name)
    if label is not None and version is not None:
        raise InvalidContent("Give label or version, not both.", {"label": ["Not allowed together with version."]})
    if version is not None and version.bundle_id != bundle.pk:
        raise NotFound("That version does not belong to this bundle.")
    for name, value in (("external_id", external_id), ("routing_key", routing_key)):
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= EXTERNAL_ID_MAX):
            raise InvalidContent(f"{name} is not valid.", {name: [f"A string of 1 to {EXTERNAL_ID_MAX} characters."]})
    # Governance protects what agents run: a pin by number must pass what the bundle's labels
    # require, unless ops granted this role or key "pin any version" (403 pin_not_allowed).
    return pin_policy.require_pinnable(bundle=bundle, version=version, actor=actor) if version is not None else None


def _pin_audited(*, session: Session, pin: pin_policy.PinVerdict, actor: Actor, evaluation: bool) -> None:
    audit_record(
        actor=actor,
        action="session.pinned_by_number",
        target_type="session",
        target=str(session.pk),
        data={
            "bundle_id": session.bundle_id,
            "version": pin.version,
            "content_hash": pin.content_hash,
            "allowed": pin.reason,
            "evaluation": evaluation,
        },
    )


_PLAIN_START = frozenset({"bundle", "label", "ttl_seconds", "routing_key"})


def start_is_plain(data: dict[str, Any]) -> bool:
    """True for a validated start body that sessions_start_on_label takes: a label (or none),
    a valid ttl and routing key, and no version, external_id or variables (whose checks and
    conflicts are per session)."""
    if not _PLAIN_START.issuperset(data):
        return False
    try:
        _validate_ttl(data.get("ttl_seconds"))
    except InvalidContent:
        return False
    key = data.get("routing_key")
    return key is None or (isinstance(key, str) and 1 <= len(key) <= EXTERNAL_ID_MAX)


def sessions_start_on_label(
    *, bundle: Bundle, label: str | None, starts: list[tuple[Actor, int | None, str | None]]
) -> list[Session]:
    """session_start for several plain starts (start_is_plain) on one bundle and label, each
    (actor, ttl_seconds, routing_key) within its key's scope: one short transaction that locks
    the label once and each pinned version once (lifecycle.versions_pin_on_label) and inserts
    the sessions in one statement, the same locking argument as one start. An error (no such
    label, a required session variable) is every start's answer alike."""
    for actor, _, _ in starts:
        require_session_role(actor)
        require_bundle_scope(actor, bundle.name)
    ids = [uuid7() for _ in starts]
    with transaction.atomic():
        pinned = lifecycle.versions_pin_on_label(
            bundle=bundle,
            label=label,
            routing_keys=[key or str(sid) for (_, _, key), sid in zip(starts, ids, strict=True)],
        )
        variables = {v.pk: _session_variables(version=v, given=None) for v in pinned}
        sessions = [
            _new_session(
                session_id=session_id,
                routing_key=routing_key,
                bundle=bundle,
                version=version,
                label=label or DEFAULT_LABEL,
                actor=actor,
                external_id=None,
                ttl=_validate_ttl(ttl_seconds),
                variables=variables[version.pk],
            )
            for (actor, ttl_seconds, routing_key), session_id, version in zip(starts, ids, pinned, strict=True)
        ]
        _insert(*sessions)
    instruments.session_event(event="started", count=len(sessions))
    instruments.sessions_started([s.version_id for s in sessions])
    return sessions


# The session's INSERT as raw SQL: Django's INSERT compiler cost a sixth of a start's CPU
# (measured). Every concrete field, prepared as Model.save prepares it; no signal receivers
# or history hang on Session, so nothing else would have run.
# The lease's times are the database's now(), never the node's clock (issue 36): a web node
# whose clock runs ahead would start leases that the workers' sweep, on the database's time,
# sees as longer, and one running behind would start leases that end early.
_LEASE_TIMES = {
    "started_at": "now()",
    "last_seen_at": "now()",
    "expires_at": "now() + %s * interval '1 second'",
}
_INSERT_FIELDS = [f for f in Session._meta.concrete_fields if f.attname not in _LEASE_TIMES]
_INSERT_SQL = (
    f"INSERT INTO {Session._meta.db_table} "
    f"({', '.join([*(str(f.column) for f in _INSERT_FIELDS), *_LEASE_TIMES])}) VALUES "
)
_INSERT_ROW = f"({', '.join([*(['%s'] * len(_INSERT_FIELDS)), *_LEASE_TIMES.values()])})"


def _insert(*sessions: Session) -> None:
    values = []
    for session in sessions:
        values += [f.get_db_prep_save(getattr(session, f.attname), connection) for f in _INSERT_FIELDS]
        values.append(session.ttl_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT_SQL + ", ".join([_INSERT_ROW] * len(sessions)) + " RETURNING id, started_at, expires_at", values
        )
        times = {row[0]: row[1:] for row in cursor.fetchall()}
    for session in sessions:
        session.started_at, session.expires_at = times[session.pk]
        session.last_seen_at = session.started_at
        session._state.adding, session._state.db = False, connection.alias


def _new_session(
    *,
    session_id: uuid.UUID,
    routing_key: str | None,
    bundle: Bundle,
    version: BundleVersion,
    label: str | None,
    actor: Actor,
    external_id: str | None,
    ttl: int,
    variables: dict[str, Any],
) -> Session:
    """A new session's row (not saved), its lease starting now (the times here are the node's
    placeholders: _insert writes the database's and sets them on the row)."""
    now = timezone.now()
    return Session(
        id=session_id,
        routing_key=routing_key,
        bundle=bundle,
        version=version,
        label=label,
        api_key_id=actor.owner_key_id,  # the key's rotation lineage owns it (Actor.owns)
        external_id=external_id,
        ttl_seconds=ttl,
        started_at=now,
        last_seen_at=now,
        expires_at=now + timedelta(seconds=ttl),
        variables=variables,
    )


def _session_variables(*, version: BundleVersion, given: Any) -> dict[str, Any]:
    # Checked only once the version is pinned: which declarations apply depends on the label's
    # target at this instant. A refusal rolls back the pin (and any state it wrote) with it.
    declared = content_document(version_id=version.pk, content_hash=version.content_hash).get("variables")
    try:
        values = content_variables.resolve(declared, given, scope="session")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None
    # The caller's values only (defaults are the publisher's): a strict bundle takes short
    # single-line values that cannot rewrite the prompt around them (registry.guard).
    if isinstance(given, dict) and given and guard.strict_conversation(version.bundle_id):
        guard.check_variables({name: values[name] for name in given if name in values})
    return values


def _existing_by_external_id(*, actor: Actor, external_id: str, bundle: Bundle) -> Session | None:
    owners = {actor.api_key_id, actor.owner_key_id}  # as Actor.owns: the lineage, or the key itself
    existing = (
        Session.objects.select_related("bundle", "version")
        .defer("version__canonical")
        .filter(api_key_id__in=owners, external_id=external_id)
        .first()
    )
    if existing is not None and existing.bundle_id != bundle.pk:
        raise Conflict(
            "This external_id already names a session on another bundle.",
            {"external_id": [external_id], "bundle": [existing.bundle.name]},
        )
    return existing


# One statement ends sessions (one, or a batch of the fast lane's): the UPDATE and the read of
# their versions' state. The session rows are locked in id order first, so two batches that
# share sessions cannot deadlock. What ends with them in other apps (skills' L3 cards) goes in a
# second statement, sessions_app.hooks.sessions_ended, with the rows still locked: the lock
# order (registry.lifecycle.locks) is session row, then its cards. A card registration
# (skills.services) locks the session first too, so an end may wait for one, and the card it
# committed meanwhile is visible to that second statement (a registration after the end finds
# the session ended and adds nothing).
# The version is read FOR SHARE, and only when the UPDATE ended the session (the scalar
# subquery runs per ended row). That lock is what makes reading the state before our commit
# safe, in the terms of registry.lifecycle.locks: a label move (or drain) takes the version FOR UPDATE.
# If it holds the lock first, we wait for its commit and the locking read returns the newest
# row, `draining`, so we ask for a drain. If we hold it first, the move waits for our commit,
# and its later check for active sessions (a separate statement, fresh snapshot) no longer
# sees ours. Either way no end on a draining version goes unnoticed, and a live version (the
# common case) costs no extra statement and no broker call. The periodic sweep remains the
# backstop for a drain request lost with the broker. Session row, then version row: nothing
# holds a version row FOR UPDATE and then waits for a session row, so no cycle.
_END_SQL = f"""
WITH due AS (
    SELECT id FROM sessions_app_session
    WHERE id = ANY(%(ids)s::uuid[]) AND status = 'active'
    ORDER BY id FOR UPDATE
), ended AS (
    UPDATE sessions_app_session e SET status = 'ended', ended_at = %(now)s
    FROM due WHERE e.id = due.id
    RETURNING e.*
)
SELECT {PINNED_COLUMNS},
    (SELECT locked.state FROM registry_bundleversion locked WHERE locked.id = s.version_id FOR SHARE)
FROM ended s
JOIN registry_bundleversion v ON v.id = s.version_id
JOIN registry_bundle b ON b.id = s.bundle_id
"""


def _end_active(*, session_ids: list[str], now: datetime) -> dict[str, Session]:
    """End the active sessions among `session_ids` (_END_SQL, then hooks.sessions_ended) and ask, after
    the commit, for a drain of each draining version once. Returns the ended sessions by id,
    with `bundle` and `version` set."""
    with connection.cursor() as cursor:
        cursor.execute(_END_SQL, {"ids": session_ids, "now": now})
        rows = cursor.fetchall()
    ended: dict[str, Session] = {}
    draining: set[int] = set()
    for row in rows:
        pinned = pinned_row(row[:-1])
        assert pinned is not None
        ended[str(pinned.session.pk)] = pinned.session
        if row[-1] == VersionState.DRAINING:
            draining.add(pinned.session.version_id)
    instruments.version_used([s.version_id for s in ended.values()])
    hooks.sessions_ended(list(ended))
    for version_id in sorted(draining):
        transaction.on_commit(partial(lifecycle.enqueue_version_drain, version_id))
    return ended


def session_end(*, session: Session, actor: Actor) -> Session:
    """End a session; ending an ended or expired session changes nothing.

    Two statements (_END_SQL, then hooks.sessions_ended for the cards, including one a
    registration committed while the end waited for its lock), without a transaction of their own, when the key that
    started the session ends it (the common case); with the audit record in one transaction
    when ops end someone else's. A drain is requested after the commit only when the version is draining."""
    _check_owner(session=session, actor=actor)
    now = timezone.now()
    by_owner = actor.owns(session.api_key_id)
    with transaction.atomic() if not by_owner else nullcontext():
        ended = _end_active(session_ids=[str(session.pk)], now=now)
        if ended and not by_owner:
            audit_record(
                actor=actor,
                action="session.ended_by_ops",
                target_type="session",
                target=str(session.pk),
                data={"bundle_id": session.bundle_id, "version_id": session.version_id},
            )
    if ended:
        session.status, session.ended_at = SessionStatus.ENDED, now
        instruments.session_event(event="ended")  # after the commit above
    else:  # it had ended or expired already: answer with what the database holds
        session.refresh_from_db(fields=["status", "ended_at", "last_seen_at", "expires_at"])
    return session


def sessions_end_owned(*, session_ids: list[str]) -> dict[str, Session]:
    """End several active sessions for the keys that started them (end_is_plain was checked),
    in one statement and one commit, as session_end ends one; returns the ended sessions by id
    (with `bundle` and `version` set). An id missing from it was no longer active: its caller
    answers it with session_end, which reports what the database holds."""
    ended = _end_active(session_ids=session_ids, now=timezone.now())
    if ended:
        instruments.session_event(event="ended", count=len(ended))
    return ended


def _check_owner(*, session: Session, actor: Actor) -> None:
    require_session_role(actor)
    # Ownership needs a key on both sides: two keyless actors (people in the admin) share nothing.
    owns = actor.owns(session.api_key_id)
    if not owns and not actor.has_role(Role.OPS):
        raise Forbidden("Only the key that started a session, or ops, may change it.")
    # Ops too only within its key's bundle scope (the same answer as for no such session).
    if not actor.may_see_bundle(session.bundle.name):
        raise NotFound(f"No session {session.pk}.")


# The sweep expires lapsed sessions in batches, each its own short transaction, so that 100,000
# lapsed sessions never mean one statement holding 100,000 row locks. SKIP LOCKED: a session
# whose row is busy (a renewal or an end in flight) is left to that writer, and to the next
# sweep if it is still lapsed then. The inner SELECT walks session_active_expiry_idx; ARRAY()
# makes it one InitPlan, so the UPDATE finds its rows by primary key (with `id IN (SELECT ...)`
# the planner hash-joined against a sequential scan of every session, ended ones included).
SWEEP_BATCH = 1000
_EXPIRE_SQL = """
UPDATE sessions_app_session SET status = 'expired', ended_at = COALESCE(%(now)s::timestamptz, now())
WHERE id = ANY(ARRAY(
    SELECT id FROM sessions_app_session
    WHERE status = 'active' AND expires_at <= COALESCE(%(now)s::timestamptz, now()) {only}
    ORDER BY expires_at LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, version_id
"""


def _announce_expired(rows: list[tuple[Any, int]]) -> None:
    """The session.expired events of one sweep batch, in its transaction."""
    versions = {
        pk: (number, bundle)
        for pk, number, bundle in BundleVersion.objects.filter(pk__in={v for _, v in rows}).values_list(
            "pk", "number", "bundle__name"
        )
    }
    for session_id, version_id in rows:
        number, bundle = versions[version_id]
        events.emit("session.expired", session=str(session_id), bundle=bundle, version=number)


def session_expire_lapsed(
    *,
    session_ids: list[Any] | None = None,
    now: datetime | None = None,
    batch: int = SWEEP_BATCH,
    max_batches: int | None = None,
) -> int:
    """Expire active sessions whose lease ran out (all of them, or only `session_ids`), `batch`
    at a time, each batch committed on its own (at most `max_batches`), and ask for a drain
    check of their versions after each commit. Returns how many expired. Lapsed by the
    database's now() unless `now` is given (tests, and a caller that means a fixed instant):
    no node's clock decides that a lease ran out."""
    statement = expire_statement(session_ids=session_ids, now=now, batch=batch)
    total = batches = 0
    announce = events.subscribed("session.expired")  # opt-in: one event per session
    while max_batches is None or batches < max_batches:
        batches += 1
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(*statement)
                rows = cursor.fetchall()
            # Their L3 cards go with them, as with an end (and in the same lock order).
            hooks.sessions_ended([str(session_id) for session_id, _ in rows])
            version_ids = [version_id for _, version_id in rows]
            for version_id in set(version_ids):
                transaction.on_commit(partial(lifecycle.version_drain_request, version_id))
            if announce and rows:
                _announce_expired(rows)
        total += len(version_ids)
        if len(version_ids) < batch:
            break
    if total:
        instruments.session_event(event="expired", count=total)
    return total


def expire_statement(
    *, session_ids: list[Any] | None = None, now: datetime | None = None, batch: int = SWEEP_BATCH
) -> tuple[str, dict[str, Any]]:
    """One batch of session_expire_lapsed: its UPDATE and parameters (bench/scale.py explains it)."""
    only = "AND id = ANY(%(ids)s::uuid[])" if session_ids is not None else ""
    return _EXPIRE_SQL.format(only=only), {"now": now, "batch": batch, "ids": [str(i) for i in session_ids or []]}


def session_use(*, session_id: UUID | str, actor: Actor, force: bool = False) -> Session:
    """One per-turn call on a session (fetch, heartbeat, render, route, compact, file tools):
    the read and checks of session_for_fetch (404, 410 revoked or ended), then session_touch
    (410 for a lease that ran out, else the lease renewed; `force` for a heartbeat)."""
    return session_touch(session=session_for_fetch(session_id=session_id, actor=actor), force=force)


def session_touch(*, session: Session, force: bool = False) -> Session:
    """Renew the lease of an active session on a fetch or heartbeat (raises SessionEnded
    otherwise, and expires a session whose lease ran out). The caller has checked that the
    actor may see the session (sessions_app.selectors.session_for_fetch).

    A fetch (force=False) writes only once the lease is a quarter-TTL old: after any fetch
    the lease then still runs at least 3/4 TTL, so an agent fetching at least every TTL/2
    never expires, and the hot path skips the write on most calls."""
    now = timezone.now()
    if session.status != SessionStatus.ACTIVE:
        raise SessionEnded(f"Session {session.pk} is {session.status}; start a new session.")
    # The node's clock only decides when to write (touch_due); whether the lease ran out is the
    # database's call, in the renewal's own WHERE or the expiry's, so a node whose clock runs
    # ahead neither refuses nor expires a session whose lease is still running.
    if force or touch_due(
        expires_at=session.expires_at, last_seen_at=session.last_seen_at, ttl_seconds=session.ttl_seconds, now=now
    ):
        with connection.cursor() as cursor:
            cursor.execute(_TOUCH_SQL, [session.pk])
            renewed = cursor.fetchone()
        if renewed is None:
            if session_expire_lapsed(session_ids=[session.pk]):
                raise SessionEnded(f"Session {session.pk} expired; start a new session.")
            raise lease_lost(session.pk)
        session.last_seen_at, session.expires_at = renewed
        instruments.version_used([session.version_id])
    return session


_TOUCH_SQL = """
UPDATE sessions_app_session SET last_seen_at = now(), expires_at = now() + ttl_seconds * interval '1 second'
WHERE id = %s AND status = 'active' AND expires_at > now()
RETURNING last_seen_at, expires_at
"""


def lease_lost(session_id: Any) -> SessionEnded:
    """What a lease renewal that found the session no longer active answers."""
    return SessionEnded(f"Session {session_id} has ended; start a new session.")


# Locks the rows in id order first (FOR UPDATE in a CTE): two batches from two web processes
# that share sessions then take their locks in the same order and cannot deadlock.
_RENEW_SQL = f"""
WITH due AS (
    SELECT id FROM sessions_app_session
    WHERE id = ANY(%s::uuid[]) AND status = 'active' AND expires_at > now()
    ORDER BY id FOR UPDATE
)
UPDATE sessions_app_session s SET last_seen_at = now(), expires_at = now() + s.ttl_seconds * interval '1 second'
FROM due, registry_bundleversion v, registry_bundle b
WHERE s.id = due.id AND v.id = s.version_id AND b.id = s.bundle_id
RETURNING {PINNED_COLUMNS}
"""


def renew_statement(*, session_ids: list[str]) -> tuple[str, list[Any]]:
    """sessions_renew's UPDATE and its parameters (bench/scale.py explains it)."""
    return _RENEW_SQL, [session_ids]


def sessions_renew(*, session_ids: list[str]) -> dict[str, Session]:
    """Renew the leases of several active sessions at once, as session_touch(force=True) renews
    one (the fast lane's batched heartbeats): one UPDATE, one commit. Returns the renewed
    sessions by id (with `bundle` and `version` set); an id missing from it had ended or
    lapsed, and answers lease_lost."""
    with connection.cursor() as cursor:
        cursor.execute(*renew_statement(session_ids=session_ids))
        rows = cursor.fetchall()
    renewed = {}
    for row in rows:
        pinned = pinned_row(row)
        assert pinned is not None
        renewed[str(pinned.session.pk)] = pinned.session
    return renewed


def sessions_to_lineage(*, key_id: int, lineage_id: int | None) -> None:
    """Move the active sessions stored under `key_id` itself (started by the previous release,
    or before lineages existed) to its lineage, so that the key rotated to owns them too; a
    session whose external_id the lineage already holds stays (Actor.owns still accepts it).
    access.hooks calls it inside api_key_rotate's transaction (registered by sessions_app/apps.py)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sessions_app_session s SET api_key_id = %s WHERE s.api_key_id = %s AND s.status = 'active'"
            " AND (s.external_id IS NULL OR NOT EXISTS (SELECT 1 FROM sessions_app_session o"
            " WHERE o.api_key_id = %s AND o.external_id = s.external_id))",
            [lineage_id, key_id, lineage_id],
        )
