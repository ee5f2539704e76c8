"""Row locks of the release lifecycle and their order. This docstring is the one description
of the protocol: every service that takes these locks (registry.services, registry.releases,
the rest of registry.lifecycle, sessions_app.services, skills.services) points here.

The locking protocol (PostgreSQL, READ COMMITTED), and why it holds:

* Lock order is label row, then version rows in ascending id. Session start takes
  label FOR SHARE then version FOR SHARE (version_pin); a label move takes label FOR UPDATE
  (label_lock) then the versions it leaves and reaches FOR UPDATE (versions_lock); a release
  (registry.releases) takes every label row it moves first, in ascending id, then all their
  versions in ascending id; a drain, a revoke, and recording or withdrawing an approval
  (registry.approvals.approval_record) take only the version FOR UPDATE; approving a change
  request (registry.changes.change_approve) takes its label rows like a move or a release, then
  the change row, then (when it applies) the versions; rejecting takes only the change row; a session
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
* A move never passes with an approval that was withdrawn under it: a move counts a target's
  approvals (registry.lifecycle.labels.approvals_verdict) only after versions_lock, in a
  statement of its own, and an approval's record or withdrawal holds that version row until it
  commits; so the count is of committed approvals, whichever came first.
* A session that starts while its label moves pins the old or the new target, never
  anything else: the label row lock makes the two serial, and a locking read in READ
  COMMITTED returns the newest committed row (so the starter sees the move it waited on).
* A version is never drained under an active session: session start holds the version
  FOR SHARE from its state check until its INSERT commits; the drain takes the version
  FOR UPDATE (which waits for that commit) and only then, in a *separate* statement with a
  fresh snapshot, looks for labels and active sessions. A single
  `UPDATE ... WHERE NOT EXISTS (active session)` is not enough: its subquery runs on the
  snapshot taken before it waited, so it misses the session that just committed
  (tests/sessions_app/test_races.py keeps that broken drain as a negative control). The session's
  foreign key alone does not help either: it takes FOR KEY SHARE, which does not conflict
  with the UPDATE of a non-key column such as `state`.
* The Django ORM has no FOR SHARE; session start uses raw SQL for it, deliberately, so
  that many sessions can start on one version at once (FOR UPDATE would serialise every
  session start of a bundle on its production version row).
* A session never starts on a drained version: start re-reads the state under the lock and
  refuses `drained`. Starting on an `unreleased` version takes FOR UPDATE instead, because
  it writes the state (to `draining`: pinned, no label) in the same transaction.
"""

import json

from django.db import connection

from core.errors import NotFound
from registry.models import Bundle, BundleVersion, Label


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
