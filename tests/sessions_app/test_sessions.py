"""Pinning and leases, through the service layer."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import Conflict, NotFound, SessionEnded, VersionRevoked
from registry.models import BundleVersion
from registry.services import label_move, version_revoke
from sessions_app.models import Session
from sessions_app.selectors import pinned_bundle_body, session_for_fetch
from sessions_app.services import session_end, session_start, session_touch
from sessions_app.sweep import sessions_sweep
from tests.conftest import pinned_body


def fetch(session, actor) -> bytes:
    return pinned_bundle_body(session_touch(session=session_for_fetch(session_id=session.pk, actor=actor)))


def test_it_keeps_a_session_on_its_version_after_the_label_moves(bundle, production, v1, v2, agent, ops):
    a, created = session_start(bundle=bundle, actor=agent.actor)
    assert created and a.version_id == v1.pk and a.label == "production"
    first = fetch(a, agent.actor)
    assert first == pinned_body(v1)

    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    b, _ = session_start(bundle=bundle, actor=agent.actor)
    assert b.version_id == v2.pk
    assert fetch(a, agent.actor) == first
    assert fetch(b, agent.actor) == pinned_body(v2)
    assert BundleVersion.objects.get(pk=v1.pk).state == "draining"


def test_it_pins_an_explicit_version_and_a_named_label(bundle, production, v1, v2, agent, ops):
    label_move(bundle=bundle, name="staging", version=v2, actor=ops.actor, reason="try v2")
    by_label, _ = session_start(bundle=bundle, actor=agent.actor, label="staging")
    by_version, _ = session_start(bundle=bundle, actor=agent.actor, version=v1)
    assert (by_label.version_id, by_label.label) == (v2.pk, "staging")
    assert (by_version.version_id, by_version.label) == (v1.pk, None)


def test_it_refuses_a_missing_label(bundle, v1, agent):
    with pytest.raises(NotFound):
        session_start(bundle=bundle, actor=agent.actor)  # no production label yet
    assert not Session.objects.exists()


def test_pinning_an_unreleased_version_makes_it_draining_and_it_drains_after(bundle, v1, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor, version=v1)
    assert BundleVersion.objects.get(pk=v1.pk).state == "draining"
    session_end(session=session, actor=agent.actor)
    sessions_sweep()
    assert BundleVersion.objects.get(pk=v1.pk).state == "drained"


def test_an_evaluation_session_leaves_an_unreleased_version_unreleased(bundle, v1, v2, agent, ops):
    state = lambda v: BundleVersion.objects.get(pk=v.pk).state  # noqa: E731
    for _ in range(2):  # a candidate is evaluated again and again
        trial, _ = session_start(bundle=bundle, actor=agent.actor, version=v1, evaluation=True)
        assert state(v1) == "unreleased"
        session_end(session=trial, actor=agent.actor)
        sessions_sweep()
        assert state(v1) == "unreleased"
    # A session that is not an evaluation's still starts the drain, which waits for both.
    trial, _ = session_start(bundle=bundle, actor=agent.actor, version=v1, evaluation=True)
    plain, _ = session_start(bundle=bundle, actor=agent.actor, version=v1)
    assert state(v1) == "draining"
    session_end(session=plain, actor=agent.actor)
    sessions_sweep()
    assert state(v1) == "draining"
    session_end(session=trial, actor=agent.actor)
    sessions_sweep()
    assert state(v1) == "drained"
    # A released version keeps its drain promise: evaluation sessions on it count as any.
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    held, _ = session_start(bundle=bundle, actor=agent.actor, version=v2, evaluation=True)
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="back to v1")
    sessions_sweep()
    assert state(v2) == "draining"
    session_end(session=held, actor=agent.actor)
    sessions_sweep()
    assert state(v2) == "drained"


def test_it_refuses_to_pin_a_drained_or_revoked_version(bundle, production, v1, v2, agent, ops):
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    assert BundleVersion.objects.get(pk=v1.pk).state == "drained"
    with pytest.raises(Conflict) as drained:
        session_start(bundle=bundle, actor=agent.actor, version=BundleVersion.objects.get(pk=v1.pk))
    assert drained.value.details["labels"] == {"production": 2}
    version_revoke(version=v1, actor=ops.actor, reason="leaks data")
    with pytest.raises(VersionRevoked):
        session_start(bundle=bundle, actor=agent.actor, version=BundleVersion.objects.get(pk=v1.pk))
    assert Session.objects.count() == 0


def test_a_revoked_version_answers_410_naming_the_current_labels(bundle, production, v1, v2, agent, ops):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    version_revoke(version=v1, actor=ops.actor, reason="leaks data")
    with pytest.raises(VersionRevoked) as caught:
        fetch(session, agent.actor)
    assert caught.value.details == {"labels": {"production": 2}}


def test_the_same_external_id_returns_the_same_session(bundle, production, agent, publisher):
    first, created = session_start(bundle=bundle, actor=agent.actor, external_id="conv-1")
    again, created_again = session_start(bundle=bundle, actor=agent.actor, external_id="conv-1")
    other_key, _ = session_start(bundle=bundle, actor=publisher.actor, external_id="conv-1")
    assert created and not created_again and again.pk == first.pk
    assert other_key.pk != first.pk
    assert Session.objects.count() == 2


def test_a_fetch_writes_the_lease_only_once_a_quarter_ttl_old(bundle, production, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=400)
    started = Session.objects.get(pk=session.pk)
    fetch(session, agent.actor)
    assert Session.objects.get(pk=session.pk).last_seen_at == started.last_seen_at  # no write

    old = timezone.now() - timedelta(seconds=101)  # just past ttl/4
    Session.objects.filter(pk=session.pk).update(last_seen_at=old, expires_at=old + timedelta(seconds=400))
    fetch(session, agent.actor)
    renewed = Session.objects.get(pk=session.pk)
    assert renewed.last_seen_at > old
    assert renewed.expires_at - renewed.last_seen_at == timedelta(seconds=400)


@pytest.mark.parametrize("age_fraction", [0.0, 0.1, 0.24, 0.26, 0.5, 0.99])
def test_after_any_fetch_the_lease_runs_at_least_three_quarters_of_the_ttl(bundle, production, agent, age_fraction):
    # So an agent fetching at least every TTL/2 can never expire.
    ttl = 1000
    session, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=ttl)
    seen = timezone.now() - timedelta(seconds=ttl * age_fraction)
    Session.objects.filter(pk=session.pk).update(last_seen_at=seen, expires_at=seen + timedelta(seconds=ttl))
    fetch(session, agent.actor)
    remaining = Session.objects.get(pk=session.pk).expires_at - timezone.now()
    assert remaining >= timedelta(seconds=ttl * 0.75 - 1)


def test_a_lapsed_session_is_expired_on_its_next_fetch(bundle, production, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=60)
    past = timezone.now() - timedelta(seconds=1)
    Session.objects.filter(pk=session.pk).update(expires_at=past)
    with pytest.raises(SessionEnded):
        fetch(session, agent.actor)
    assert Session.objects.get(pk=session.pk).status == "expired"


def test_the_sweep_expires_lapsed_sessions_only(bundle, production, agent):
    lapsed, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=60)
    fresh, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=60)
    Session.objects.filter(pk=lapsed.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sessions_sweep() == {"expired": 1, "drained": 0}
    assert Session.objects.get(pk=lapsed.pk).status == "expired"
    assert Session.objects.get(pk=fresh.pk).status == "active"


def test_ending_is_idempotent_and_then_fetch_and_heartbeat_answer_ended(bundle, production, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    assert session_end(session=session, actor=agent.actor).status == "ended"
    assert session_end(session=session, actor=agent.actor).status == "ended"
    with pytest.raises(SessionEnded):
        fetch(session, agent.actor)
    with pytest.raises(SessionEnded):
        session_touch(session=Session.objects.get(pk=session.pk), force=True)


def test_a_heartbeat_on_a_revoked_version_answers_revoked_too(bundle, production, v1, v2, agent, ops):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    version_revoke(version=v1, actor=ops.actor, reason="leaks data")
    response = agent.post(f"/api/v1/sessions/{session.pk}/heartbeat/")
    assert response.status_code == 410
    assert response.json()["error"]["code"] == "version_revoked"


@pytest.mark.parametrize("path", ["/api/v1/bundles/refunds/versions/99999999999999999999/", "/api/v1/bundles"])
def test_odd_paths_get_a_json_404(bundle, agent, path):
    response = agent.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_huge_version_number_in_a_body_is_not_found(bundle, production, agent):
    response = agent.post("/api/v1/sessions/", {"bundle": "refunds", "version": 10**30})
    assert response.status_code in (400, 404)
    assert response.json()["error"]["code"] in ("validation_error", "not_found")
    assert not Session.objects.exists()


@pytest.mark.parametrize("skew", [timedelta(hours=2), -timedelta(hours=2)])
def test_leases_are_timed_by_the_database_whatever_the_nodes_clock_says(bundle, production, agent, monkeypatch, skew):
    """Issue 36 (carried over): leases were computed on the web node's clock and expired on the
    worker's. A node whose clock is two hours off (ahead or behind, beyond any TTL) now starts,
    renews and checks leases on the database's now(): nothing ends early or runs long."""
    from django.db import connection

    def database_now():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]

    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + skew)  # the node's clock, skewed
    session, _ = session_start(bundle=bundle, actor=agent.actor, ttl_seconds=60)
    row = Session.objects.get(pk=session.pk)
    assert abs(row.started_at - database_now()) < timedelta(seconds=5)
    assert row.expires_at - row.started_at == timedelta(seconds=60)
    assert session.expires_at == row.expires_at  # what the answer says is what was written
    # A fetch and a heartbeat on the skewed node keep the session (a node ahead thought it lapsed).
    session_touch(session=session_for_fetch(session_id=session.pk, actor=agent.actor))
    touched = session_touch(session=session_for_fetch(session_id=session.pk, actor=agent.actor), force=True)
    assert abs(touched.expires_at - (database_now() + timedelta(seconds=60))) < timedelta(seconds=5)
    # A sweep on a skewed worker expires nothing that is still running.
    assert sessions_sweep() == {"expired": 0, "drained": 0}
    assert Session.objects.get(pk=session.pk).status == "active"
    # And a lease that did run out (on the database's clock) is expired whatever the node says.
    Session.objects.filter(pk=session.pk).update(expires_at=database_now() - timedelta(seconds=1))
    with pytest.raises(SessionEnded):
        session_touch(session=session_for_fetch(session_id=session.pk, actor=agent.actor))
    assert Session.objects.get(pk=session.pk).status == "expired"
