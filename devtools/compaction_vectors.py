"""Regenerate tests/fixtures/compaction_vectors.json from the cases below.

The expected outputs are computed by core.compaction and then reviewed by hand: run this only
when the rule changes on purpose, and read the diff of the JSON file before committing it.
Usage: python -m devtools.compaction_vectors
"""

import json
from pathlib import Path
from typing import Any

from core.compaction import Policy, compact, policy_from_content

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "compaction_vectors.json"


def openai_conversation(results: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent. Use tools to look things up."},
        {"role": "user", "content": "Where is order 1042, and what did it cost?"},
    ]
    for i, text in enumerate(results):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": "x" * 60, "n": i})},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    messages.append({"role": "assistant", "content": "Order 1042 shipped on Monday."})
    return messages


CASES: list[dict[str, Any]] = [
    {
        "name": "openai_defaults_elide_all_but_last_five",
        "policy": None,
        "messages": openai_conversation([f"result {i}: " + "abc " * 10 for i in range(7)]),
    },
    {
        "name": "openai_keep_two_and_truncate_long_results",
        "policy": {"keep_tool_results": 2, "max_tool_result_chars": 60},
        "messages": openai_conversation(["first " * 20, "second " * 20, "third " * 3, "fourth " * 30]),
    },
    {
        "name": "openai_custom_placeholder_keep_zero",
        "policy": {"keep_tool_results": 0, "placeholder": "<gone>"},
        "messages": openai_conversation(["a", "b", "c"]),
    },
    {
        "name": "openai_elide_step_keeps_results_until_keep_plus_step",
        "policy": {"keep_tool_results": 2, "elide_step": 3},
        "messages": openai_conversation([f"result {i}" for i in range(5)]),
    },
    {
        "name": "openai_elide_step_then_elides_down_to_keep",
        "policy": {"keep_tool_results": 2, "elide_step": 3},
        "messages": openai_conversation([f"result {i}" for i in range(7)]),
    },
    {
        "name": "openai_no_tool_results_is_unchanged",
        "policy": None,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello " * 5000},
            {"role": "assistant", "content": "Hi."},
        ],
    },
    {
        "name": "openai_content_parts_truncated_in_order",
        "policy": {"keep_tool_results": 1, "max_tool_result_chars": 50},
        "messages": [
            {"role": "user", "content": "Read both files."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [
                    {"type": "text", "text": "0123456789" * 3},
                    {"type": "text", "text": "abcdefghij" * 3},
                    {"type": "text", "text": "never seen"},
                ],
            },
        ],
    },
    {
        "name": "openai_limit_smaller_than_marker_leaves_the_bare_marker",
        "policy": {"keep_tool_results": 5, "max_tool_result_chars": 5},
        "messages": openai_conversation(["a long enough tool result"]),
    },
    {
        "name": "cjk_counts_characters_not_bytes",
        "policy": {"keep_tool_results": 1, "max_tool_result_chars": 40},
        "messages": openai_conversation(
            ["订单已发货，预计三天内送达。" * 5, "物流单号：SF1234567890，当前在上海转运中心。" * 3]
        ),
    },
    {
        "name": "anthropic_tool_result_blocks",
        "policy": {"keep_tool_results": 1, "max_tool_result_chars": 40},
        "messages": [
            {"role": "user", "content": "Check the weather in Oslo and Bergen, then the forecast."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking up both cities."},
                    {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "tu_2", "name": "weather", "input": {"city": "Bergen"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "Oslo: 3 C, light snow, wind 4 m/s."},
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu_2",
                        "is_error": False,
                        "content": [
                            {"type": "text", "text": "Bergen: 7 C, rain."},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                        ],
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "tu_3", "name": "forecast", "input": {"days": 5}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu_3",
                        "content": "Mon 3 C; Tue 4 C; Wed 2 C; Thu 1 C; Fri 5 C; Sat 6 C; Sun 4 C.",
                    },
                    {"type": "text", "text": "Summarise it for me."},
                ],
            },
        ],
    },
    {
        "name": "anthropic_error_result_and_missing_content",
        "policy": {"keep_tool_results": 1},
        "messages": [
            {"role": "user", "content": "Try it."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "run", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": True}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "run", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "ok"}]},
        ],
    },
]


def build() -> list[dict[str, Any]]:
    vectors = []
    for case in CASES:
        policy = policy_from_content({"compaction": case["policy"]}) if case["policy"] else Policy()
        result = compact(case["messages"], policy).as_dict()
        vectors.append({**case, "expected": result})
    # Idempotence as a vector of its own: compacting the first case's output changes nothing.
    first = vectors[0]
    again = compact(first["expected"]["messages"], Policy()).as_dict()
    vectors.append(
        {
            "name": "compacting_the_output_again_changes_nothing",
            "policy": None,
            "messages": first["expected"]["messages"],
            "expected": again,
        }
    )
    return vectors


if __name__ == "__main__":
    doc = {
        "about": "Test vectors for Tier-1 micro-compaction (core/compaction.py). Each vector: the policy as it "
        "appears in a bundle's content (`compaction`, null for the defaults), the input messages, and the "
        "expected response of POST /api/v1/sessions/{id}/compact/ (messages, elided, truncated, chars_before, "
        "chars_after). The registry's endpoint and the Python client are both tested against this file.",
        "defaults": {
            "keep_tool_results": 5,
            "max_tool_result_chars": 20000,
            "placeholder": "[elided: older tool result]",
        },
        "vectors": build(),
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(doc['vectors'])} vectors to {OUT}")
