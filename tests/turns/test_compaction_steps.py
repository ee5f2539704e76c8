"""Compaction in steps (`elide_step`, core/compaction.py): results are elided only when their
count passes keep_tool_results + elide_step, then down to keep_tool_results, so a growing
conversation is rewritten once every elide_step + 1 tool results; the default (0) is the rule
every version published before it compacts by, one more result elided on each new one."""

import json
import random
from typing import Any

import pytest

from core.compaction import DEFAULT_POLICY, Policy, compact, policy_from_content

PLACEHOLDER = DEFAULT_POLICY["placeholder"]


def with_results(count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "look these up"}]
    for n in range(count):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n}"})
    return messages


def elided_count(count: int, policy: Policy) -> int:
    out = compact(with_results(count), policy).messages
    return sum(1 for m in out if m["role"] == "tool" and m["content"] == PLACEHOLDER)


def test_the_default_elides_one_more_result_on_each_result_past_keep():
    """What every version published before elide_step compacts by: unchanged."""
    assert DEFAULT_POLICY["elide_step"] == 0 and Policy().elide_step == 0
    for policy in (Policy(), policy_from_content({}), policy_from_content({"compaction": {"keep_tool_results": 2}})):
        keep = policy.keep_tool_results
        assert [elided_count(r, policy) for r in range(12)] == [max(0, r - keep) for r in range(12)]


def test_it_elides_nothing_until_keep_plus_step_then_down_to_keep():
    policy = policy_from_content({"compaction": {"keep_tool_results": 2, "elide_step": 3}})
    #                     results: 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14
    expected = [0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12]
    assert [elided_count(r, policy) for r in range(15)] == expected
    kept = [r - e for r, e in enumerate(expected)]
    assert all(2 <= k <= 5 for k in kept[2:])  # between keep and keep + step


@pytest.mark.parametrize("step", [0, 1, 3, 7])
@pytest.mark.parametrize("seed", range(4))
def test_a_growing_conversation_is_rewritten_once_every_step_plus_one_results(step, seed):
    """Turn after turn (the client sends the whole history, raw): an earlier message takes at
    most two forms, as sent and elided, the elided one stable from the turn it first appears;
    the history before the newest messages is rewritten on at most one turn in step + 1 that
    add a result; compacting an answer again changes nothing."""
    rng = random.Random(seed)
    policy = Policy(keep_tool_results=rng.randrange(4), max_tool_result_chars=40, elide_step=step)
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    forms: dict[int, list[str]] = {}
    previous: list[str] = []
    rewrites = results = 0
    for turn in range(40):
        if rng.random() < 0.6:
            history = [*history, *with_results(1)[1:]]
            history[-2]["tool_calls"][0]["id"] = history[-1]["tool_call_id"] = f"t{turn}"
            history[-1]["content"] = "x" * rng.randrange(10, 80)
            results += 1
        else:
            history = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": f"q{turn}"}]
        once = compact(history, policy)
        assert compact(once.messages, policy).messages == once.messages
        sent = [json.dumps(m, sort_keys=True) for m in once.messages]
        for i, form in enumerate(sent):
            if not forms.setdefault(i, []) or forms[i][-1] != form:
                forms[i].append(form)
        if sent[: len(previous)] != previous:
            rewrites += 1
        previous = sent
    assert all(len(f) <= 2 for f in forms.values())
    for i, f in forms.items():
        if len(f) == 2:
            assert PLACEHOLDER in f[1] and PLACEHOLDER not in f[0], i
    assert rewrites <= max(0, results - policy.keep_tool_results) // (step + 1)
