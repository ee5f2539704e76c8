"""Ends with an outcome of one version, label and day at once (evidence.counts): each adds to
its session's shard of the day's rollup in its own transaction, so one end's open transaction
does not make another wait on the same row lock, and every acknowledged outcome is counted."""

import threading

import pytest
from django.db import connection, transaction

from evidence import counts
from evidence.selectors import Arm, arm_totals
from evidence.services import OutcomeIn, session_end_outcome
from sessions_app.services import session_start

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_open_end_does_not_hold_up_another_end_of_the_same_version_label_and_day(bundle, production, agent):
    first, _ = session_start(bundle=bundle, actor=agent.actor)
    second = first
    while counts.shard_of(second.pk) == counts.shard_of(first.pk):  # 15 in 16 the first time
        second, _ = session_start(bundle=bundle, actor=agent.actor)
    resolved = OutcomeIn(status="resolved", reason="")
    held, release, failures = threading.Event(), threading.Event(), []

    def end_and_wait() -> None:
        try:
            with transaction.atomic():  # the first end's rollup row stays locked until this commits
                session_end_outcome(session=first, actor=agent.actor, outcome=resolved)
                held.set()
                release.wait(20)
        except Exception as exc:  # reported below
            failures.append(exc)
        finally:
            held.set()
            connection.close()

    thread = threading.Thread(target=end_and_wait)
    thread.start()
    try:
        assert held.wait(20)
        with transaction.atomic():
            with connection.cursor() as cursor:  # one row for both ends: this waits, then fails
                cursor.execute("SET LOCAL lock_timeout = '3s'")
            session_end_outcome(session=second, actor=agent.actor, outcome=OutcomeIn(status="failed", reason=""))
    finally:
        release.set()
        thread.join(30)
    assert not failures
    totals = arm_totals(Arm(production.version, "production"))
    assert (totals.n("outcomes"), totals.n("resolved"), totals.n("failed")) == (2, 1, 1)


def test_many_ends_at_once_are_each_counted_once(bundle, production, agent):
    sessions = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(48)]
    statuses = ["resolved", "failed", "escalated"]

    def end(share: list) -> None:
        try:
            for i, session in share:
                outcome = OutcomeIn(status=statuses[i % 3], reason="")
                session_end_outcome(session=session, actor=agent.actor, outcome=outcome)
                session_end_outcome(session=session, actor=agent.actor, outcome=outcome)  # again: no-op
        finally:
            connection.close()

    numbered = list(enumerate(sessions))
    threads = [threading.Thread(target=end, args=(numbered[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    totals = arm_totals(Arm(production.version, "production"))
    assert (totals.n("outcomes"), totals.n("resolved"), totals.n("failed"), totals.n("escalated")) == (48, 16, 16, 16)
