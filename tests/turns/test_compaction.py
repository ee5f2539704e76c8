"""Tier-1 micro-compaction: the pure function (core/compaction.py), the shared vectors, the
policy rules at publish and POST /sessions/{id}/compact/."""

import copy
import json
from pathlib import Path

import pytest

from core.compaction import CompactionError, Policy, compact, policy_errors, policy_from_content
from tests.conftest import content

VECTORS = json.loads((Path(__file__).parent.parent / "fixtures" / "compaction_vectors.json").read_text())["vectors"]


def _policy(vector) -> Policy:
    return policy_from_content({"compaction": vector["policy"]}) if vector["policy"] else Policy()


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_function_matches_each_vector(vector):
    assert compact(vector["messages"], _policy(vector)).as_dict() == vector["expected"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_compacting_twice_equals_compacting_once(vector):
    once = compact(vector["messages"], _policy(vector))
    twice = compact(once.messages, _policy(vector))
    assert twice.messages == once.messages
    assert (twice.elided, twice.truncated) == (0, 0)
    assert twice.chars_before == twice.chars_after == once.chars_after


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_it_never_reorders_or_touches_anything_but_tool_results(vector):
    original = copy.deepcopy(vector["messages"])
    out = compact(vector["messages"], _policy(vector)).messages
    assert vector["messages"] == original  # the input is not mutated
    assert len(out) == len(original)
    for before, after in zip(original, out, strict=True):
        if before.get("role") == "tool":
            assert {k: v for k, v in before.items() if k != "content"} == {
                k: v for k, v in after.items() if k != "content"
            }
            continue
        if not isinstance(before.get("content"), list):
            assert after == before  # system, user, assistant text and tool_calls arguments
            continue
        assert len(after["content"]) == len(before["content"])
        for b, a in zip(before["content"], after["content"], strict=True):
            if b.get("type") == "tool_result":
                assert a["tool_use_id"] == b["tool_use_id"]
            else:
                assert a == b  # text and tool_use input untouched


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_everything_before_the_first_elided_message_is_byte_identical(vector):
    out = compact(vector["messages"], _policy(vector)).messages
    # The first message the expected output changes, from the vector itself (not from what
    # compact() returned): a compaction that touched an earlier message fails below.
    changed = [
        i for i, (a, b) in enumerate(zip(vector["messages"], vector["expected"]["messages"], strict=True)) if a != b
    ]
    first = changed[0] if changed else len(out)
    for i in range(first):
        assert json.dumps(out[i], ensure_ascii=False) == json.dumps(vector["messages"][i], ensure_ascii=False)
        assert out[i] is vector["messages"][i]


def test_a_truncated_result_states_the_characters_removed_and_fits_the_limit():
    text = "x" * 1000
    messages = [{"role": "tool", "tool_call_id": "a", "content": text}]
    out = compact(messages, Policy(keep_tool_results=5, max_tool_result_chars=100)).messages[0]["content"]
    kept, marker = out.split("\n")
    assert marker == f"[truncated {1000 - len(kept)} chars]"
    assert len(out) == 100 and text.startswith(kept)


def test_it_refuses_shapes_it_cannot_read():
    with pytest.raises(CompactionError):
        compact({"role": "user"})
    with pytest.raises(CompactionError):
        compact([{"content": "no role"}])
    with pytest.raises(CompactionError):
        compact([{"role": "tool", "content": 42}])


def test_policy_rules():
    assert policy_errors({"keep_tool_results": 0, "max_tool_result_chars": 0, "placeholder": ""}) == []
    assert [p for p, _ in policy_errors({"keep_tool_results": -1})] == ["compaction.keep_tool_results"]
    assert [p for p, _ in policy_errors({"max_tool_result_chars": "10"})] == ["compaction.max_tool_result_chars"]
    assert [p for p, _ in policy_errors({"keep_tool_results": True})] == ["compaction.keep_tool_results"]
    assert [p for p, _ in policy_errors({"placeholder": 3})] == ["compaction.placeholder"]
    assert [p for p, _ in policy_errors({"keep": 3})] == ["compaction.keep"]
    assert policy_errors([5]) != []
    assert policy_errors({"elide_step": 0}) == policy_errors({"elide_step": 4}) == []
    for step in (-1, "2", True, 1.5):
        assert [p for p, _ in policy_errors({"elide_step": step})] == ["compaction.elide_step"]
    assert policy_from_content({}) == Policy(5, 20000, "[elided: older tool result]", 0)


# The endpoint ----------------------------------------------------------------------------------


def _session_on(ops, agent, compaction):
    ops.post("/api/v1/bundles/", {"name": "compacting", "description": "d"})
    doc = content()
    if compaction is not None:
        doc["compaction"] = compaction
    published = ops.post("/api/v1/bundles/compacting/versions/", {"message": "m", "content": doc})
    assert published.status_code == 201, published.json()
    number = published.json()["number"]
    started = agent.post("/api/v1/sessions/", {"bundle": "compacting", "version": number})
    assert started.status_code == 201, started.json()
    return started.json()["id"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_endpoint_matches_each_vector(ops, agent, vector):
    session_id = _session_on(ops, agent, vector["policy"])
    response = agent.post(f"/api/v1/sessions/{session_id}/compact/", {"messages": vector["messages"]})
    assert response.status_code == 200, response.json()
    assert response.json() == vector["expected"]


@pytest.mark.parametrize(
    "policy",
    [{"keep_tool_results": -1}, {"max_tool_result_chars": "big"}, {"placeholder": None}, {"elide_step": -2}, [1], "x"],
)
def test_a_wrong_policy_is_refused_at_publish(ops, policy):
    ops.post("/api/v1/bundles/", {"name": "compacting", "description": "d"})
    response = ops.post("/api/v1/bundles/compacting/versions/", {"message": "m", "content": content(compaction=policy)})
    assert response.status_code == 400
    assert any(key.startswith("content.compaction") for key in response.json()["error"]["details"])


def test_a_bundle_without_a_policy_keeps_its_canonical_bytes(ops):
    ops.post("/api/v1/bundles/", {"name": "compacting", "description": "d"})
    response = ops.post("/api/v1/bundles/compacting/versions/", {"message": "m", "content": content()})
    assert "compaction" not in response.json()["content"] and "skills" not in response.json()["content"]


def test_the_endpoint_refuses_bad_messages_and_other_sessions(ops, agent):
    session_id = _session_on(ops, agent, None)
    bad = agent.post(f"/api/v1/sessions/{session_id}/compact/", {"messages": [{"role": "tool", "content": 1}]})
    assert bad.status_code == 400 and bad.json()["error"]["details"] == {
        "messages[0].content": ["A tool result's content must be a string, a list of parts or null."]
    }
    assert agent.post(f"/api/v1/sessions/{session_id}/compact/", {}).status_code == 400
    assert agent.post(f"/api/v1/sessions/{session_id}/compact/", [1]).status_code == 400
    from tests.conftest import make_api

    other = make_api("agent", name="other-agent")
    assert other.post(f"/api/v1/sessions/{session_id}/compact/", {"messages": []}).status_code == 404
    agent.post(f"/api/v1/sessions/{session_id}/end/")
    assert agent.post(f"/api/v1/sessions/{session_id}/compact/", {"messages": []}).status_code == 410
