"""The turn call's cost is bounded per request and per key (issue 36, Medium): content parts
and tool calls are capped (not only messages), a key has at most TURN_CONCURRENCY turn calls
running at once (429 in the contract's shape on both lanes)."""

import json
import time
from typing import Any

import pytest
from django.test import override_settings

from access import ratelimit
from skills.services import MAX_PARTS, MAX_PER_MESSAGE, MAX_TOOL_CALLS
from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from tests.turns.test_turn import World, user

JSON_TYPE = {"Content-Type": "application/json"}


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


def _call(n: int, i: int) -> dict[str, Any]:
    return {"id": f"c{n}_{i}", "type": "function", "function": {"name": "process_refund", "arguments": "{}"}}


def assistant(n: int, calls: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [_call(n, i) for i in range(calls)]}


def the_issue_s_conversation() -> list[dict[str, Any]]:
    """120 assistant messages of 100 tool calls each, inside 2 MiB and 500 messages: the
    request of the report, which took 0.9 s of CPU and answered 2.9 MB."""
    return [user("refund everything"), *(assistant(n, 100) for n in range(120))]


def test_the_report_s_conversation_is_refused_before_any_work(world):
    body = {"messages": the_issue_s_conversation(), "format": "anthropic"}
    assert len(json.dumps(body)) < 2 * 1024 * 1024
    response = world.agent.post(f"/api/v1/sessions/{world.session}/turn/", body)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"] == {"messages[1].tool_calls": [f"At most {MAX_PER_MESSAGE} per message."]} or error[
        "details"
    ] == {"messages": [f"At most {MAX_TOOL_CALLS} tool calls in all; send the recent ones."]}


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([user("x"), assistant(0, MAX_PER_MESSAGE + 1)], "messages[1].tool_calls"),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}] * (MAX_PER_MESSAGE + 1)}], "messages[0].content"),
        ([user("x"), *(assistant(n, 100) for n in range(MAX_TOOL_CALLS // 100)), assistant(99, 1)], "messages"),
        (
            [user("x")]
            + [{"role": "user", "content": [{"type": "text", "text": "x"}] * 100}] * (MAX_PARTS // 100)
            + [user("y") | {"content": [{"type": "text", "text": "x"}]}],
            "messages",
        ),
    ],
    ids=["tool calls in a message", "parts in a message", "tool calls in all", "parts in all"],
)
def test_one_over_each_bound_is_a_400_naming_it(world, messages, where):
    response = world.agent.post(f"/api/v1/sessions/{world.session}/turn/", {"messages": messages})
    assert response.status_code == 400, response.content[:300]
    assert list(response.json()["error"]["details"]) == [where]


def worst_within_bounds() -> list[dict[str, Any]]:
    """Every bound at once: MAX_TOOL_CALLS tool calls (8 assistant messages of 125) and
    MAX_PARTS content parts (16 messages of 125 parts of 500 characters), about 1.3 MB."""
    per = 125
    assert per <= MAX_PER_MESSAGE
    parts = [{"type": "text", "text": "refund order 42 please, " * 20}] * per
    return [
        user("refund all of these"),
        *(assistant(n, per) for n in range(MAX_TOOL_CALLS // per)),
        *({"role": "user", "content": parts} for _ in range(MAX_PARTS // per)),
        user("done?"),
    ]


def test_the_worst_request_within_the_bounds_is_answered(world):
    """Every bound at once is answered (without `format`: with one, a provider would refuse its
    unanswered tool calls, and the registry does too). Its CPU is printed, not asserted
    (bench/ measures; the report's request took 0.9 s)."""
    messages = worst_within_bounds()
    path = f"/api/v1/sessions/{world.session}/turn/"
    world.turn({"messages": [user("hello")]})  # the version's first turn builds its routing index
    started = time.process_time()
    answered = world.agent.post(path, {"messages": messages})
    cpu = time.process_time() - started
    assert answered.status_code == 200, answered.content[:300]
    assert answered.json()["messages"]
    print(f"worst turn within the bounds: {cpu:.3f} s CPU, answer {len(answered.content)} bytes")


def test_the_worst_valid_conversation_within_the_bounds_is_answered_with_a_request(world):
    """MAX_PARTS content parts as tool_use blocks and their tool_result blocks, paired, with
    `format`: the provider request is built."""
    per = MAX_PER_MESSAGE // 2 * 2
    pairs = MAX_PARTS // (2 * per)
    messages: list[dict[str, Any]] = [user("refund all of these")]
    for n in range(pairs):
        uses = [{"type": "tool_use", "id": f"t{n}_{i}", "name": "process_refund", "input": {}} for i in range(per)]
        results = [{"type": "tool_result", "tool_use_id": f"t{n}_{i}", "content": "ok"} for i in range(per)]
        messages += [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    response = world.agent.post(
        f"/api/v1/sessions/{world.session}/turn/", {"messages": messages, "format": "anthropic"}
    )
    assert response.status_code == 200, response.content[:300]
    assert response.json()["request"]["messages"]


@pytest.mark.django_db(transaction=True)
def test_a_key_past_its_turn_slots_gets_429_on_both_lanes_and_other_keys_do_not(monkeypatch):
    world = World(monkeypatch)
    path = f"/api/v1/sessions/{world.session}/turn/"
    body = json.dumps({"messages": [user("refund order 42")]}).encode()
    with override_settings(TURN_CONCURRENCY=2):
        held = [ratelimit.turn_slot(actor=world.agent.actor) for _ in range(2)]  # two running turns
        assert all(held)
        fast, slow = both("POST", path, world.agent.secret, body, **JSON_TYPE)
        _same(fast, slow)
        assert fast[0] == 429 and fast[1][b"retry-after"] == b"2"
        error = json.loads(fast[2])["error"]
        assert error["code"] == "throttled" and "2 turn calls running" in error["message"]
        other = ratelimit.turn_slot(actor=world.ops.actor)  # another key has its own slots
        assert other is not None
        other.release()
        held.pop().release()  # type: ignore[union-attr]
        fast, slow = both("POST", path, world.agent.secret, body, **JSON_TYPE)
        assert (fast[0], slow[0]) == (200, 200)  # a slot is free again, and given back after each call
        for slot in held:
            slot.release()  # type: ignore[union-attr]
