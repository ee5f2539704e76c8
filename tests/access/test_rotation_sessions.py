"""Rotating a key keeps its sessions: they belong to the key's lineage (the key and every key
rotated from it, access.services.api_key_rotate), not to one secret. Through the API: the new
key fetches, heartbeats, ends and finds by external_id the sessions the old key started; during
a grace period the old key still reaches them (and the new key's); an unrelated key of the
same role does not."""

from datetime import timedelta

import pytest

from access.actors import SYSTEM
from access.models import ApiKey
from access.services import api_key_create, api_key_rotate
from tests.conftest import Api


def _key(name: str = "support-bot") -> tuple[ApiKey, Api]:
    key, secret = api_key_create(name=name, role="agent", actor=SYSTEM)
    return key, Api(secret, key.as_actor())


def _rotate(key: ApiKey, grace: timedelta = timedelta(0)) -> tuple[ApiKey, Api]:
    new, secret = api_key_rotate(key=key, actor=SYSTEM, grace=grace)
    return new, Api(secret, new.as_actor())


@pytest.mark.django_db
def test_the_new_key_reaches_the_sessions_the_old_key_started(bundle, production, v1):
    key, old = _key()
    started = old.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    named = old.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-1"}).json()["id"]
    _, new = _rotate(key)
    assert old.get(f"/api/v1/sessions/{started}/bundle/").status_code == 401, "the old key stopped"
    assert new.get(f"/api/v1/sessions/{started}/bundle/").status_code == 200
    assert new.post(f"/api/v1/sessions/{started}/heartbeat/").status_code == 200
    again = new.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-1"})
    assert again.status_code == 200 and again.json()["id"] == named, "the same conversation, not a second session"
    ended = new.post(f"/api/v1/sessions/{started}/end/")
    assert ended.status_code == 200 and ended.json()["status"] == "ended"


@pytest.mark.django_db
def test_during_the_grace_period_both_keys_reach_each_others_sessions(bundle, production, v1):
    key, old = _key()
    before = old.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    rotated, new = _rotate(key, grace=timedelta(minutes=30))
    during = old.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]  # the old key still works
    by_new = new.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    for session in (before, during, by_new):
        assert old.get(f"/api/v1/sessions/{session}/bundle/").status_code == 200
        assert new.get(f"/api/v1/sessions/{session}/bundle/").status_code == 200
    # rotated twice: the third key still reaches the first key's sessions
    _, third = _rotate(rotated)
    assert third.post(f"/api/v1/sessions/{before}/end/").status_code == 200
    assert third.get(f"/api/v1/sessions/{during}/bundle/").status_code == 200


@pytest.mark.django_db
def test_another_key_of_the_same_name_and_role_does_not_reach_them(bundle, production, v1):
    key, old = _key()
    session = old.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    _rotate(key)
    _, stranger = _key()  # same name and role, created rather than rotated
    assert stranger.get(f"/api/v1/sessions/{session}/bundle/").status_code == 404
    assert stranger.post(f"/api/v1/sessions/{session}/end/").status_code == 404


@pytest.mark.django_db
def test_sessions_stored_under_the_key_itself_stay_reachable_and_move_at_the_next_rotation(bundle, production, v1):
    # What the previous release writes during a rolling upgrade (and wrote before lineages): a
    # session under the exact key that started it, even when that key was rotated from another.
    from sessions_app.models import Session

    first, _ = _key()
    rotated, new = _rotate(first, grace=timedelta(minutes=30))
    legacy = new.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-9"}).json()["id"]
    Session.objects.filter(pk=legacy).update(api_key_id=rotated.pk)  # as the previous release stores it
    assert new.get(f"/api/v1/sessions/{legacy}/bundle/").status_code == 200, "the key that started it"
    again = new.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-9"})
    assert again.json()["id"] == legacy, "found by external_id too"
    _, third = _rotate(rotated)
    assert Session.objects.get(pk=legacy).api_key_id == first.pk, "the rotation moved it to the lineage"
    assert third.post(f"/api/v1/sessions/{legacy}/heartbeat/").status_code == 200
