"""Generated conversations through the turn call (issue 37: valid or refused, never invalid).

Hypothesis builds conversations of user and assistant text, system messages, rounds of tool
calls answered in full, in part or not at all, results without their call, and sometimes a
`window`; each is sent in the neutral shape and in each format's own shape. Every answer is a
200 whose request the provider stand-in's rules accept (devtools/provider_standin.py), or a 400
in the contract's shape; never a 500, never a request the provider refuses."""

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.provider_standin import check
from tests.turns.test_turn import World
from turns import providers

Step = tuple[Any, ...]

steps = st.one_of(
    st.tuples(st.just("user"), st.sampled_from(["refund order 42", "where is my parcel", "thanks", " "])),
    st.tuples(st.just("assistant"), st.sampled_from(["Sure.", "Done.", ""])),
    st.tuples(st.just("system"), st.just("Be brief.")),
    # calls: how many, how many of them get their result (in order), whether the results come back reversed
    st.tuples(st.just("calls"), st.integers(1, 3), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("orphan"), st.just("call_nowhere")),
)


def conversation(plan: list[Step]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n, step in enumerate(plan):
        kind = step[0]
        if kind in ("user", "assistant", "system"):
            messages.append({"role": kind, "content": step[1]})
        elif kind == "orphan":
            messages.append({"role": "tool", "tool_call_id": step[1], "content": "lost"})
        else:
            _kind, count, answered, reverse = step
            ids = [f"c{n}_{k}" for k in range(count)]
            calls = [{"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            results = [{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in ids[:answered]]
            messages += list(reversed(results)) if reverse else results
    return messages


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples on every run, so CI does not flake on a new one
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=st.lists(steps, min_size=1, max_size=12), window=st.one_of(st.none(), st.integers(1, 8)))
def test_every_answer_is_a_request_the_provider_accepts_or_a_400(world, plan, window):
    messages = conversation(plan)
    for fmt in providers.FORMATS:
        shapes = [messages]
        if fmt in ("gemini", "bedrock-converse", "openai-responses"):
            shapes.append(providers.to_messages(fmt, messages))  # the same in the format's own shape
        for shape in shapes:
            body: dict[str, Any] = {"messages": shape, "format": fmt}
            if window is not None:
                body["window"] = window
            response = world.agent.post(f"/api/v1/sessions/{world.session}/turn/", body)
            assert response.status_code in (200, 400), (fmt, shape, response.content)
            answer = response.json()
            if response.status_code == 400:
                assert answer["error"]["code"] == "validation_error" and answer["error"]["details"]
                continue
            assert check(fmt, answer["request"]) == [], (fmt, shape, answer["request"])
