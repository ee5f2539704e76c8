"""The end with an outcome and the scores through both HTTP lanes (their entries in
api/routes.py): the fast lane answers as Django does, for the success and each error."""

import json

import pytest

from access.models import Role
from evidence.models import SessionOutcome
from tests.conftest import make_api
from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from tests.turns.test_turn import World

pytestmark = pytest.mark.django_db(transaction=True)
JSON_TYPE = {"Content-Type": "application/json"}


@pytest.fixture
def world(monkeypatch) -> World:
    return World(monkeypatch)


def test_the_fast_lane_answers_scores_as_django_does(world):
    path = f"/api/v1/sessions/{world.session}/scores/"
    secret = world.agent.secret
    body = json.dumps({"name": "thumbs", "value": 1, "id": "same"}).encode()
    fast, slow = both("POST", path, secret, body, **JSON_TYPE)
    assert (fast[0], slow[0]) == (201, 200)  # the second is the same id again
    assert json.loads(fast[2])["id"] == json.loads(slow[2])["id"] == "same"
    for bad in (b"[]", b'{"name": "x"}', b'{"name": "x", "value": 1, "y": 2}', b'{"name": "x", "value": "no"}'):
        fast, slow = both("POST", path, secret, bad, **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 400
    stranger = make_api(Role.AGENT, name="t-stranger")
    fast, slow = both("POST", path, stranger.secret, body, **JSON_TYPE)
    _same(fast, slow)
    assert fast[0] == 404


def test_the_fast_lane_ends_with_an_outcome_as_django_does(world):
    secret = world.agent.secret
    other = world.start()
    for session in (world.session, other):
        path = f"/api/v1/sessions/{session}/end/"
        bad = json.dumps({"outcome": {"status": "meh"}}).encode()
        _same(*both("POST", path, secret, bad, **JSON_TYPE))
    # one lane ends each session with its outcome; both then answer the other outcome 409 alike
    good = json.dumps({"outcome": {"status": "resolved"}}).encode()
    fast, slow = both("POST", f"/api/v1/sessions/{world.session}/end/", secret, good, **JSON_TYPE)
    _same(fast, slow, volatile=("last_seen_at", "expires_at"))
    assert fast[0] == 200
    conflict = json.dumps({"outcome": {"status": "failed"}}).encode()
    fast, slow = both("POST", f"/api/v1/sessions/{world.session}/end/", secret, conflict, **JSON_TYPE)
    _same(fast, slow)
    assert fast[0] == 409
    # a plain end (no body) is still the batched one
    fast, slow = both("POST", f"/api/v1/sessions/{other}/end/", secret)
    _same(fast, slow, volatile=("last_seen_at", "expires_at", "ended_at"))
    assert fast[0] == 200
    assert list(SessionOutcome.objects.values_list("status", flat=True)) == ["resolved"]
