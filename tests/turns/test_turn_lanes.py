"""The turn call through both HTTP lanes (its entry in api/routes.py): the fast lane answers as
Django does, and one turn is one call against the key's rate limit."""

import json

import pytest
from django.test import override_settings

from access.models import Role
from tests.conftest import make_api
from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from tests.turns.test_turn import World, tool_exchange, user

pytestmark = pytest.mark.django_db(transaction=True)
JSON_TYPE = {"Content-Type": "application/json"}


@pytest.fixture
def world(monkeypatch) -> World:
    return World(monkeypatch)


def test_the_fast_lane_answers_the_turn_as_django_does(world):
    path = f"/api/v1/sessions/{world.session}/turn/"
    secret = world.agent.secret
    messages = [user("I want a refund for order 42"), *tool_exchange(1), user("and my invoice?")]
    for fmt in (None, "anthropic", "gemini"):
        body = {"messages": messages, **({"format": fmt} if fmt else {})}
        fast, slow = both("POST", path, secret, json.dumps(body).encode(), **JSON_TYPE)
        assert fast[0] == 200, fast[2][:300]
        _same(fast, slow, volatile=("turn",))  # each answer opened its own turn
        assert json.loads(fast[2])["turn"] + 1 == json.loads(slow[2])["turn"]
    unknown = b'{"messages": [{"role": "user", "content": "x"}], "x": 1}'
    for bad in [b"", b"[]", b'{"messages": [}', b'{"messages": []}', unknown]:
        fast, slow = both("POST", path, secret, bad, **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 400
    other = make_api(Role.AGENT, name="t-stranger")
    body = json.dumps({"messages": [user("hi")]}).encode()
    _same(*both("POST", path, other.secret, body, **JSON_TYPE))
    world.agent.post(f"/api/v1/sessions/{world.session}/end/")
    fast, slow = both("POST", path, secret, body, **JSON_TYPE)
    _same(fast, slow)
    assert fast[0] == 410 and json.loads(fast[2])["error"]["code"] == "session_ended"


def test_one_turn_is_one_call_against_the_rate_limit(world):
    path = f"/api/v1/sessions/{world.session}/turn/"
    body = json.dumps({"messages": [user("refund order 42")], "invoked": []}).encode()
    # three writes this minute: the session's start, then two turns (one in each lane), each
    # one call although it reports, routes, renders and compacts
    with override_settings(API_THROTTLE_RATES={"read": "100/m", "write": "3/m"}):
        first = both("POST", path, world.agent.secret, body, **JSON_TYPE)
        assert [a[0] for a in first] == [200, 200]
        fast, slow = both("POST", path, world.agent.secret, body, **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 429 and b"retry-after" in fast[1]
