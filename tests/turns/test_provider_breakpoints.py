"""The second cache breakpoint (core/provider_messages.py, issue 21): anthropic and
bedrock-converse requests end the stable prefix and the conversation with a breakpoint each,
the per-turn text after the second; the markers a client echoes back are the registry's to
move; the provider's rules (at most four, not on thinking or empty text) hold."""

import json
from typing import Any

import pytest

from tests.turns.test_turn import World, tool_exchange, user
from turns import provider_input, providers
from turns.provider_messages import BREAKPOINT_LIMIT, breakpoint_problems, mark_conversation_end

EPHEMERAL = {"type": "ephemeral"}
CACHE_POINT = {"cachePoint": {"type": "default"}}


def parts(messages: list[dict[str, Any]], turn_text: str = "Current date: 2026-12-02\nskills") -> providers.TurnParts:
    return providers.TurnParts(
        system="You help.",
        tools=[{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}],
        prefix_sha256="0" * 64,
        model={"name": "claude-sonnet-4-6"},
        output_schema=None,
        messages=messages,
        turn_text=turn_text,
    )


def markers(body: dict[str, Any]) -> int:
    text = json.dumps(body)
    return text.count('"cache_control"') + text.count('"cachePoint"')


def test_it_marks_the_last_block_before_the_turn_text_of_the_newest_user_message():
    body = providers.build_request("anthropic", parts([user("hi"), *tool_exchange(1), user("and now?")])).body
    assert markers(body) == 2 and body["system"][0]["cache_control"] == EPHEMERAL
    last = body["messages"][-1]["content"]
    assert last[0] == {"type": "text", "text": "and now?", "cache_control": EPHEMERAL}
    assert last[1] == {"type": "text", "text": "Current date: 2026-12-02\nskills"}
    assert body["messages"][:3] == providers.to_messages("anthropic", [user("hi"), *tool_exchange(1)])
    assert breakpoint_problems("anthropic", body) == []


def test_after_a_tool_result_the_breakpoint_is_on_the_result_and_the_turn_text_follows_it():
    body = providers.build_request("anthropic", parts([user("hi"), *tool_exchange(1)])).body
    last = body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"]
    assert last[0]["cache_control"] == EPHEMERAL and "cache_control" not in last[1]
    bedrock = providers.build_request("bedrock-converse", parts([user("hi"), *tool_exchange(1)])).body
    content = bedrock["messages"][-1]["content"]
    assert [next(iter(b)) for b in content] == ["toolResult", "cachePoint", "text"]
    assert markers(bedrock) == 2 and bedrock["system"][-1] == CACHE_POINT


def test_a_conversation_ending_with_the_assistant_is_marked_there_and_the_turn_text_is_its_own_message():
    messages = [user("hi"), {"role": "assistant", "content": "Hello."}]
    body = providers.build_request("anthropic", parts(messages)).body
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello.", "cache_control": EPHEMERAL}],
    }
    assert body["messages"][2] == {"role": "user", "content": "Current date: 2026-12-02\nskills"}
    bedrock = providers.build_request("bedrock-converse", parts(messages)).body
    assert bedrock["messages"][1]["content"] == [{"text": "Hello."}, CACHE_POINT]
    assert bedrock["messages"][2] == {"role": "user", "content": [{"text": "Current date: 2026-12-02\nskills"}]}


def test_thinking_blocks_and_empty_text_never_carry_the_breakpoint():
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    messages = [
        user("hi"),
        {"role": "assistant", "content": [{"type": "text", "text": "Let me see."}, thinking]},
        {"role": "user", "content": ""},
    ]
    marked = mark_conversation_end("anthropic", providers.to_messages("anthropic", messages))
    assert marked[1]["content"] == [{"type": "text", "text": "Let me see.", "cache_control": EPHEMERAL}, thinking]
    assert marked[2] == {"role": "user", "content": ""}
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}
    converse = [{"role": "user", "content": [{"text": "hi"}]}, {"role": "assistant", "content": [reasoning]}]
    assert mark_conversation_end("bedrock-converse", converse)[0]["content"] == [{"text": "hi"}, CACHE_POINT]
    assert mark_conversation_end("anthropic", []) == []


@pytest.mark.parametrize("fmt", ["anthropic", "bedrock-converse"])
def test_markers_echoed_back_are_moved_never_added_up(fmt):
    """A client sends back the conversation it sent: ten turns later there are still two at the
    ends, and never more than the four the provider takes (the others keep the lookback,
    test_provider_lookback.py)."""
    key = providers.STABLE[fmt][1]
    conversation: list[dict[str, Any]] = [user("hi")]
    for n in range(10):
        body = providers.build_request(fmt, parts(conversation, f"turn {n}")).body
        assert 2 <= markers(body) <= BREAKPOINT_LIMIT, n
        assert breakpoint_problems(fmt, body) == []
        sent = body[key]
        if fmt == "anthropic":
            answer = {"role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]}
            conversation = [*sent, answer, user(f"question {n}")]
        else:  # read back from Converse's own shape, as the turn call reads it
            answer = {"role": "assistant", "content": [{"text": f"answer {n}"}]}
            items = [*sent, answer, {"role": "user", "content": [{"text": f"question {n}"}]}]
            conversation = provider_input.read(fmt, items).neutral


def test_markers_nested_in_an_echoed_tool_result_are_taken_out_too():
    """A tool_result's own content list may hold a marked block a client echoed back: only the
    top-level blocks were cleaned, so five such results made a request the provider refuses."""
    marked_result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": "42", "cache_control": EPHEMERAL}],
    }
    conversation = [user("hi")]
    for n in range(5):
        conversation += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "lookup", "input": {}}]},
            {"role": "user", "content": [marked_result, {"type": "text", "text": f"q{n}"}]},
        ]
    request = providers.build_request("anthropic", parts(conversation))
    assert markers(request.body) == 2 and request.notes == []
    nested = [
        {
            "role": "user",
            "content": [dict(marked_result, content=[{"type": "text", "text": "", **{"cache_control": EPHEMERAL}}])],
        }
    ]
    assert breakpoint_problems("anthropic", {"messages": nested}) == [
        "messages[0].content[0].content[0]: cannot carry cache_control."
    ]


def test_openai_and_gemini_requests_carry_no_marker():
    for fmt in ("openai-chat", "openai-responses", "gemini"):
        body = providers.build_request(fmt, parts([user("hi"), *tool_exchange(1), user("and now?")])).body
        assert markers(body) == 0, fmt


def test_the_breakpoint_rules():
    empty = {"type": "text", "text": "", "cache_control": EPHEMERAL}
    thinking = {"type": "thinking", "thinking": "x", "signature": "s", "cache_control": EPHEMERAL}
    body = {"system": [{"type": "text", "text": "s", "cache_control": EPHEMERAL}], "messages": []}
    body["messages"] = [{"role": "user", "content": [empty]}, {"role": "assistant", "content": [thinking]}]
    assert breakpoint_problems("anthropic", body) == [
        "messages[0].content[0]: cannot carry cache_control.",
        "messages[1].content[0]: cannot carry cache_control.",
    ]
    many = [{"type": "text", "text": str(i), "cache_control": EPHEMERAL} for i in range(BREAKPOINT_LIMIT)]
    assert breakpoint_problems("anthropic", {**body, "messages": [{"role": "user", "content": many}]}) == [
        "5 breakpoints, more than the 4 the provider takes."
    ]
    converse = {"system": [{"text": "s"}, CACHE_POINT], "messages": [{"role": "user", "content": [CACHE_POINT] * 4}]}
    assert breakpoint_problems("bedrock-converse", converse) == ["5 breakpoints, more than the 4 the provider takes."]


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


@pytest.mark.parametrize("fmt", ["anthropic", "bedrock-converse"])
def test_the_turn_call_sends_two_breakpoints_the_second_before_the_turn_text(world, fmt):
    history = [user("I want a refund for order 42"), *tool_exchange(1), user("and the VAT?")]
    stable = set()
    for n in range(3):
        answer = world.turn({"messages": history, "format": fmt})
        request = answer["request"]
        assert markers(request) == 2 and breakpoint_problems(fmt, request) == []
        last = request["messages"][-1]["content"]
        if fmt == "anthropic":
            assert last[-2]["cache_control"] == EPHEMERAL and last[-2]["text"] == history[-1]["content"]
            assert last[-1]["text"].startswith(answer["tail"])
        else:
            assert last[-3:-1] == [{"text": history[-1]["content"]}, CACHE_POINT]
            assert last[-1]["text"].startswith(answer["tail"])
        stable.add(providers.stable_part(fmt, request))
        history = [*history, *tool_exchange(n + 2), user(f"and order {n}?")]
    assert len(stable) == 1
