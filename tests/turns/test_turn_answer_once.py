"""With `format`, the turn call's answer carries the conversation once, in `request` (issue 36,
Medium): `messages` is left out (docs/api.md, the turn call); without `format` it is there as
always. Both lanes answer the same bytes."""

import json
import time
from typing import Any

import pytest

from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from tests.turns.test_turn import World, user
from tests.turns.test_turn_bounds import JSON_TYPE

MARK = "a-result-seen-once"


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


def tool_heavy(per: int = 125, pairs: int = 8, why: str = MARK) -> list[dict[str, Any]]:
    """The report's shape within the bounds: `pairs` assistant messages of `per` tool calls, each
    answered (a provider refuses unanswered calls), in Anthropic blocks: 2,000 parts. The calls'
    inputs carry `why` (the compaction elides old tool results, never the calls)."""
    messages: list[dict[str, Any]] = [user("refund all of these")]
    for n in range(pairs):
        uses = [
            {"type": "tool_use", "id": f"t{n}_{i}", "name": "process_refund", "input": {"why": f"{why} {n}/{i}"}}
            for i in range(per)
        ]
        done = [{"type": "tool_result", "tool_use_id": f"t{n}_{i}", "content": "refunded"} for i in range(per)]
        messages += [{"role": "assistant", "content": uses}, {"role": "user", "content": done}]
    return messages


@pytest.mark.django_db(transaction=True)  # the fast lane reads through its own connections
@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses"])
def test_with_a_format_the_conversation_is_in_the_request_only_on_both_lanes(monkeypatch, fmt):
    world = World(monkeypatch)
    path = f"/api/v1/sessions/{world.session}/turn/"
    body = json.dumps({"messages": tool_heavy(per=3, pairs=2), "format": fmt}).encode()
    fast, slow = both("POST", path, world.agent.secret, body, **JSON_TYPE)
    assert fast[0] == slow[0] == 200, fast[2][:300]
    for raw in (fast[2], slow[2]):
        answer = json.loads(raw)
        assert "messages" not in answer
        assert raw.count(f"{MARK} 1/2".encode()) == 1  # once: the request's, not also beside it
        key = "input" if fmt == "openai-responses" else "messages"
        assert f"{MARK} 1/2" in json.dumps(answer["request"][key])


def test_without_a_format_the_messages_are_answered_as_always(world):
    answer = world.turn({"messages": [user("hello"), {"role": "assistant", "content": "hi"}, user("refund 42")]})
    assert [m["content"] for m in answer["messages"]] == ["hello", "hi", "refund 42"]
    assert "request" not in answer


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat"])
def test_the_reports_shape_within_the_bounds_answers_its_conversation_once(world, fmt):
    """1,000 tool calls and their results (2,000 parts) with `format`: the answer's bytes and the
    call's CPU are printed (docs/reliability.md); the conversation is in them once."""
    messages = tool_heavy(why=MARK + " refund it: paid twice, the customer asked on the phone; " * 20)
    assert len(json.dumps({"messages": messages, "format": fmt})) < 2 * 1024 * 1024
    path = f"/api/v1/sessions/{world.session}/turn/"
    world.turn({"messages": [user("hello")]})  # the version's first turn builds its routing index
    started = time.process_time()
    answered = world.agent.post(path, {"messages": messages, "format": fmt})
    cpu = time.process_time() - started
    print(f"\n{fmt}: {cpu:.3f} s CPU, answer {len(answered.content)} bytes")
    assert answered.status_code == 200, answered.content[:300]
    assert answered.content.count(f"{MARK} refund it".encode()) == 1000  # each call once
