"""Version lifecycle: live, draining, drained, revoked; drain actions; the sweep."""

import json
import logging
import threading

import psycopg
import pytest
from django.db import connection, connections

from core.errors import Conflict
from registry import bundle_cache, lifecycle
from registry.lifecycle import version_drain
from registry.models import BundleVersion
from registry.services import label_move, label_rollback, version_revoke
from sessions_app.models import SweepLease
from sessions_app.selectors import pinned_bundle_body, session_for_fetch
from sessions_app.services import session_end, session_start, session_touch
from sessions_app.sweep import sessions_sweep, sweep_lease_release, sweep_lease_take
from tests.live import database_url


def v1_of(bundle):
    return BundleVersion.objects.get(bundle=bundle, number=1)


def state(version) -> str:
    return BundleVersion.objects.get(pk=version.pk).state


def drained_events(caplog) -> list[dict]:
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "registry.events"]
    return [r for r in records if r["event"] == "version.drained"]


def test_a_label_makes_its_version_live(production, v1):
    assert state(v1) == "live"


def test_moving_the_last_label_off_an_idle_version_drains_it_at_once(
    bundle, production, v1, v2, ops, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.INFO, logger="registry.events")
    with django_capture_on_commit_callbacks(execute=True):
        label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    fresh = BundleVersion.objects.get(pk=v1.pk)
    assert (fresh.state, fresh.drained_at is not None) == ("drained", True)
    assert state(v2) == "live"
    events = drained_events(caplog)
    assert [(e["event"], e["bundle"], e["version"]) for e in events] == [("version.drained", "refunds", 1)]


def test_a_version_another_label_still_targets_stays_live(bundle, production, v1, v2, ops):
    label_move(bundle=bundle, name="canary", version=v1, actor=ops.actor, reason="canary")
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    assert state(v1) == "live"
    label_move(bundle=bundle, name="canary", version=v2, actor=ops.actor, reason="done")
    assert state(v1) == "drained"


def test_a_pinned_version_drains_only_after_its_last_session_ends(
    bundle, production, v1, v2, agent, ops, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.INFO, logger="registry.events")
    a, _ = session_start(bundle=bundle, actor=agent.actor)
    b, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    assert state(v1) == "draining"
    assert BundleVersion.objects.get(pk=v1.pk).draining_since is not None

    session_end(session=a, actor=agent.actor)
    assert version_drain(version_id=v1.pk) is False  # b is still pinned
    assert state(v1) == "draining"
    session_end(session=b, actor=agent.actor)
    with django_capture_on_commit_callbacks(execute=True):
        assert version_drain(version_id=v1.pk) is True
    assert version_drain(version_id=v1.pk) is False  # idempotent: a redelivered task does nothing
    assert state(v1) == "drained"
    assert len(drained_events(caplog)) == 1


def test_a_session_end_asks_for_a_drain_only_when_its_version_is_draining(
    bundle, production, v1, v2, agent, ops, monkeypatch, django_capture_on_commit_callbacks
):
    asked: list[int] = []
    monkeypatch.setattr(lifecycle, "enqueue_version_drain", asked.append)
    on_live, _ = session_start(bundle=bundle, actor=agent.actor)
    on_draining, _ = session_start(bundle=bundle, actor=agent.actor)
    with django_capture_on_commit_callbacks(execute=True):
        session_end(session=on_live, actor=agent.actor)
    assert asked == []  # a label still targets v1: nothing can drain
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    with django_capture_on_commit_callbacks(execute=True):
        session_end(session=on_draining, actor=agent.actor)
        session_end(session=on_draining, actor=agent.actor)  # ended already: no second request
    assert asked == [v1.pk]


@pytest.mark.django_db(transaction=True)
def test_an_end_racing_a_label_move_reads_the_state_the_move_commits(bundle, production, v1, agent, monkeypatch):
    """A move holds the version FOR UPDATE while the end runs: the end waits on its share lock,
    then reads the committed `draining` and asks for the drain (else only the sweep would)."""
    asked: list[int] = []
    monkeypatch.setattr(lifecycle, "enqueue_version_drain", asked.append)
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    ended = threading.Event()

    def end() -> None:
        try:
            session_end(session=session, actor=agent.actor)
        finally:
            connection.close()
            ended.set()

    with psycopg.connect(database_url()) as mover:
        mover.execute("SELECT 1 FROM registry_bundleversion WHERE id = %s FOR UPDATE", [v1.pk])
        threading.Thread(target=end).start()
        assert not ended.wait(0.5), "the end must wait for the move's lock"
        mover.execute("UPDATE registry_bundleversion SET state = 'draining' WHERE id = %s", [v1.pk])
        mover.commit()
    assert ended.wait(10)
    assert asked == [v1.pk]


def test_draining_drops_the_cached_bytes(bundle, production, v1, v2, agent, ops, django_capture_on_commit_callbacks):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    pinned_bundle_body(session_touch(session=session_for_fetch(session_id=session.pk, actor=agent.actor)))
    assert bundle_cache.is_cached(v1.content_hash)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    session_end(session=session, actor=agent.actor)
    with django_capture_on_commit_callbacks(execute=True):
        version_drain(version_id=v1.pk)
    assert not bundle_cache.is_cached(v1.content_hash)


def test_a_label_moved_back_makes_a_drained_version_live_again(bundle, production, v1, v2, ops):
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    assert state(v1) == "drained"
    label_rollback(bundle=bundle, name="production", to_version=None, actor=ops.actor, reason="v2 is bad")
    fresh = BundleVersion.objects.get(pk=v1.pk)
    assert (fresh.state, fresh.drained_at, state(v2)) == ("live", None, "drained")


def test_drain_leaves_live_and_unreleased_versions_alone(production, v1, v2):
    assert version_drain(version_id=v1.pk) is False
    assert version_drain(version_id=v2.pk) is False
    assert (state(v1), state(v2)) == ("live", "unreleased")


def test_revoke_is_refused_while_a_label_targets_the_version(bundle, production, v1, v2, ops):
    with pytest.raises(Conflict) as caught:
        version_revoke(version=v1, actor=ops.actor, reason="no")
    assert caught.value.details == {"labels": ["production"]}
    assert state(v1) == "live"
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    version_revoke(version=v1, actor=ops.actor, reason="leaks data")
    assert state(v1) == "revoked"
    with pytest.raises(Conflict):
        label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="back")
    assert state(v1) == "revoked"


def test_the_sweep_drains_what_the_events_missed(bundle, production, v1, v2, agent, ops):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    session_end(session=session, actor=agent.actor)  # its on_commit enqueue never runs in this test
    assert state(v1) == "draining"
    assert sessions_sweep() == {"expired": 0, "drained": 1}
    assert state(v1) == "drained"


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_never_run_at_once(bundle, production):
    """While another beat holds the sweep's lease, a sweep does nothing; a lease whose holder
    died runs out on the database's clock, and the sweep lets go of its own."""
    assert sweep_lease_take(holder="other-beat")
    assert sessions_sweep() is None
    sweep_lease_release(holder="other-beat")
    assert sessions_sweep() == {"expired": 0, "drained": 0}
    assert not SweepLease.objects.exists()  # the sweep let go of its lease
    assert sweep_lease_take(holder="dead-beat", seconds=0)  # ran out at once: its holder died
    assert sessions_sweep() == {"expired": 0, "drained": 0}
    with connection.cursor() as cursor:  # and no advisory lock is taken (PgBouncer, issue 36)
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db(transaction=True)
def test_the_sweep_lease_survives_a_pooler_that_moves_statements_between_connections(bundle, production):
    """Issue 36: behind PgBouncer in transaction mode every statement may run on another server
    connection. The session-level advisory lock was taken on one and released (or not) on
    another; the lease is a committed row, so another connection sees it and a release from
    any connection frees it."""

    assert sweep_lease_take(holder="beat-a")
    other = connections.create_connection("default")  # another server connection, as a pooler gives
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT holder FROM sessions_app_sweeplease")
            assert cursor.fetchone() == ("beat-a",)
    finally:
        other.close()
    assert sessions_sweep() is None
    sweep_lease_release(holder="beat-a")
    assert sessions_sweep() is not None


def test_requests_do_not_wait_on_a_broker_that_is_down(
    bundle, production, v2, agent, ops, caplog, django_capture_on_commit_callbacks
):
    """Start, fetch, a label move and the end of the version's last session (both of which
    want to enqueue a drain) succeed with Redis unreachable (cache and broker): the
    first enqueue fails fast and opens the process's breaker, the second skips the broker."""
    from django.test import override_settings

    from core import breaker

    dead = "redis://127.0.0.1:1/0"
    with override_settings(BUNDLE_CACHE_URL=dead, CELERY_BROKER_URL=dead):
        with django_capture_on_commit_callbacks(execute=True):
            session, _ = session_start(bundle=bundle, actor=agent.actor)
            body = pinned_bundle_body(
                session_touch(session=session_for_fetch(session_id=session.pk, actor=agent.actor))
            )
        breaker.for_url(dead).succeeded()  # closed (if the fetch opened it), so that the enqueue tries
        with django_capture_on_commit_callbacks(execute=True):
            label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
        with django_capture_on_commit_callbacks(execute=True):
            session_end(session=session, actor=agent.actor)  # v1 is draining: a drain is wanted
        # Not a timing: the move paid one attempt (no retry loop) and opened the breaker, so
        # the end never reached for the broker at all.
        opened = breaker.for_url(dead).state
    breaker.for_url(dead).succeeded()
    assert json.loads(body)["version"] == 1
    assert opened != breaker.for_url(dead).CLOSED
    failed = [r for r in caplog.records if "could not enqueue the drain of version" in r.getMessage()]
    assert len(failed) == 1  # the move's tried the broker and gave up; the end's skipped it
    assert state(v1_of(bundle)) == "draining"  # left for the sweep


def test_readyz_answers_503_naming_the_broker_when_it_is_down(client, db):
    from config.celery import app as celery_app

    assert client.get("/readyz").status_code == 200
    saved = celery_app.conf.broker_url
    celery_app.conf.broker_url = "redis://127.0.0.1:1/0"
    celery_app._pool = None
    try:
        response = client.get("/readyz")
    finally:
        celery_app.conf.broker_url = saved
        celery_app._pool = None
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "ok"
    assert response.json()["checks"]["broker"].startswith("error")
