"""The fast lane counts a turn call against the key's write budget and takes one of its turn
slots in one Redis round trip (access.ratelimit.api_throttle_wait_then_slot): the same answers
as the two steps one after the other on the Django lane, no slot taken by a call the budget, the
role or the body refuses, and every slot given back once the call is answered."""

import json

import pytest
from django.test import override_settings

from access import ratelimit
from core.redis_client import redis_client
from registry.models import Bundle
from sessions_app.services import session_start
from tests.conftest import make_api
from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from tests.turns.test_turn import World, user

JSON_TYPE = {"Content-Type": "application/json"}
VARIABLES = {"timezone": "Europe/Paris"}  # what World's sessions start with


def _held(actor) -> int:
    """Turn slots of the key held in Redis now."""
    from django.conf import settings

    return int(redis_client(settings.REDIS_URL).zcard(ratelimit.turn_slot_spec(actor).name))


def _uncounted(actor) -> None:
    """Forget what earlier runs counted for this key id (Redis outlives the test database)."""
    from django.conf import settings

    store = redis_client(settings.REDIS_URL)
    for name in store.scan_iter(f"registry:rl:*:{actor.api_key_id}:*"):
        store.delete(name)
    store.delete(ratelimit.turn_slot_spec(actor).name)


@pytest.mark.django_db(transaction=True)
def test_a_turn_past_its_budget_is_refused_on_both_lanes_and_holds_no_slot(monkeypatch):
    world = World(monkeypatch)
    fresh = make_api("agent", name="t-budget")
    _uncounted(fresh.actor)
    session, _ = session_start(bundle=Bundle.objects.get(name="support"), actor=fresh.actor, variables=VARIABLES)
    path = f"/api/v1/sessions/{session.pk}/turn/"
    body = json.dumps({"messages": [user("refund order 42")]}).encode()
    with override_settings(API_THROTTLE_RATES={"read": "100/m", "write": "2/m"}, TURN_CONCURRENCY=1):
        fast, slow = both("POST", path, fresh.secret, body, **JSON_TYPE)
        assert (fast[0], slow[0]) == (200, 200)  # the budget's two calls, one on each lane
        assert _held(fresh.actor) == 0  # given back after each call
        fast, slow = both("POST", path, fresh.secret, body, **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 429 and json.loads(fast[2])["error"]["code"] == "throttled"
        assert "turn calls running" not in json.loads(fast[2])["error"]["message"]  # the budget's 429
        assert _held(fresh.actor) == 0  # a refused call took no slot
    assert world.session


@pytest.mark.django_db(transaction=True)
def test_a_turn_refused_for_its_body_or_its_role_holds_no_slot(monkeypatch):
    world = World(monkeypatch)
    path = f"/api/v1/sessions/{world.session}/turn/"
    with override_settings(TURN_CONCURRENCY=1):
        fast, slow = both("POST", path, world.agent.secret, b"{not json", **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 400 and _held(world.agent.actor) == 0
        ci = make_api("ci", name="t-ci")  # a role the turn route does not declare
        fast, slow = both("POST", path, ci.secret, json.dumps({"messages": [user("x")]}).encode(), **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 403 and _held(ci.actor) == 0
        # With the one slot free, the next turn is answered: nothing above kept it.
        fast, slow = both("POST", path, world.agent.secret, json.dumps({"messages": [user("x")]}).encode(), **JSON_TYPE)
        assert (fast[0], slow[0]) == (200, 200)


@pytest.mark.django_db(transaction=True)
def test_the_count_and_the_slot_in_one_step_give_what_the_two_steps_give(monkeypatch):
    World(monkeypatch)
    actor = make_api("agent", name="t-one-step").actor
    _uncounted(actor)
    with override_settings(API_THROTTLE_RATES={"read": "100/m", "write": "3/m"}, TURN_CONCURRENCY=1):
        spec = ratelimit.turn_slot_spec(actor)
        wait, first = ratelimit.api_throttle_wait_then_slot(actor=actor, method="POST", spec=spec)
        assert wait is None and first is not None and _held(actor) == 1
        wait, second = ratelimit.api_throttle_wait_then_slot(actor=actor, method="POST", spec=spec)
        assert wait is None and second is None  # counted, and the one slot is held
        first.release()
        assert _held(actor) == 0
        assert ratelimit.api_throttle_wait(actor=actor, method="POST") is None  # the third call of the budget
        wait, third = ratelimit.api_throttle_wait_then_slot(actor=actor, method="POST", spec=spec)
        assert wait is not None and wait >= 1 and third is None and _held(actor) == 0  # the fourth: refused


def test_without_redis_the_budget_fails_open_and_the_slots_are_counted_here(db):
    class Actor:
        api_key_id, name = 987654, "no-redis"

    spec = ratelimit.SlotSpec(group="turn", key="no-redis", limit=1, hold=5)
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0", API_THROTTLE_RATES={"read": "1/m", "write": "1/m"}):
        waits = [ratelimit.api_throttle_wait_then_slot(actor=Actor(), method="POST", spec=spec) for _ in range(2)]
        assert [wait for wait, _ in waits] == [None, None]  # the budget is not counted: open
        held, refused = (slot for _, slot in waits)
        assert held is not None and held.token is None and refused is None  # one slot, in this process
        held.release()
        again = ratelimit.api_throttle_wait_then_slot(actor=Actor(), method="POST", spec=spec)[1]
        assert again is not None
        again.release()
