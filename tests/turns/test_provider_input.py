"""core/provider_input.py on its own (pure, no database): a conversation in a format's own shape
read, compacted and written back; only the results the compaction changed are rewritten, in
place; windows start at a user message holding no tool result."""

import copy
import json

import pytest

from core.compaction import Policy, compact
from tests.turns.test_turn_fidelity import BEDROCK_HISTORY, GEMINI_HISTORY, RESPONSES_HISTORY
from turns import provider_input, provider_messages

HISTORIES = {
    "openai-responses": RESPONSES_HISTORY,
    "gemini": GEMINI_HISTORY,
    "bedrock-converse": BEDROCK_HISTORY,
}
ELIDE_ALL = Policy(keep_tool_results=0, max_tool_result_chars=20000, placeholder="[elided]", elide_step=0)


def written(fmt: str, items: list, policy: Policy | None = None) -> list:
    read = provider_input.read(fmt, items)
    compacted = compact(read.neutral, policy).messages
    return provider_input.write(read, compacted, provider_messages.convert_run)


@pytest.mark.parametrize("fmt", list(HISTORIES))
def test_it_writes_back_the_items_sent_when_nothing_was_compacted(fmt):
    history = copy.deepcopy(HISTORIES[fmt])
    out = written(fmt, history)
    assert json.dumps(out) == json.dumps(history)
    assert all(a is b for a, b in zip(out, history, strict=True))  # the very objects: their bytes


@pytest.mark.parametrize("fmt", list(HISTORIES))
def test_an_elided_result_is_rewritten_in_place_and_nothing_else(fmt):
    history = copy.deepcopy(HISTORIES[fmt])
    out = written(fmt, history, ELIDE_ALL)
    changed = [i for i, (a, b) in enumerate(zip(out, history, strict=True)) if a != b]
    assert len(changed) == 1  # the tool result's item
    assert "[elided]" in json.dumps(out[changed[0]])
    before, after = history[changed[0]], out[changed[0]]
    assert set(before) == set(after)  # ids, status and the other keys stay


def test_windows_start_at_a_user_message_holding_no_tool_result():
    items = [*copy.deepcopy(GEMINI_HISTORY), {"role": "model", "parts": [{"text": "more"}]}]
    assert provider_input.window(items, 4) == items[4:]  # items[2] is the function response
    assert provider_input.window(items, 5) == items[4:]
    assert provider_input.window(items, 6) == items
    assert provider_input.window(items[:3], 1) is None
    assert provider_input.is_window_start({"role": "user", "content": "hi"})
    assert not provider_input.is_window_start({"role": "user", "content": [{"type": "tool_result"}]})
    assert not provider_input.is_window_start({"role": "user", "content": [{"toolResult": {}}]})
    assert not provider_input.is_window_start({"type": "function_call_output", "call_id": "c"})


@pytest.mark.parametrize(
    ("fmt", "messages", "problem"),
    [
        ("anthropic", [{"role": "assistant", "content": "hi"}], (0, "starts with a message of the assistant")),
        (
            "openai-chat",
            [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x"}],
            (1, "no tool call"),
        ),
        (
            "openai-chat",
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]},
                {"role": "assistant", "content": "no result"},
            ],
            (1, "has no result"),
        ),
        (
            "openai-responses",  # Responses lets text come between a call and its output
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]},
                {"role": "assistant", "content": "thinking aloud"},
                {"role": "tool", "tool_call_id": "a", "content": "ok"},
            ],
            None,
        ),
    ],
)
def test_the_conversation_rules(fmt, messages, problem):
    found = provider_messages.conversation_problem(fmt, messages)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found[0] == problem[0] and problem[1] in found[1]


def test_a_request_without_a_model_says_so_in_its_notes():
    """The admin's preview builds a request for a version without a model: the notes say it
    (the turn call refuses such a request with a 400 at `model`)."""
    from turns import providers

    parts = providers.TurnParts(
        system="s", tools=[], prefix_sha256="0" * 64, model={}, output_schema=None, messages=[], turn_text="t"
    )
    for fmt in providers.FORMATS:
        assert any(note.startswith("No model") for note in providers.build_request(fmt, parts).notes), fmt
