"""promptreg.wire, the rules the HTTP-level adapters (pydantic-ai; the TypeScript client's
`registryFetch` has the same) use to lay a framework's request out again by the turn call: which
calls are model calls, what of the framework's body is the conversation, and what of it is kept
beside the pinned request."""

import json

import pytest
from promptreg.wire import Rewriter, conversation, format_of, merged, tool_names


def test_model_calls_are_known_by_their_path_and_nothing_else_is():
    assert format_of("/v1/messages") == "anthropic"
    assert format_of("/openai/v1/chat/completions/") == "openai-chat"
    assert format_of("/v1/responses") == "openai-responses"
    for other in ("/v1/messages/count_tokens", "/v1/messages/batches", "/v1/models", "/v1/embeddings"):
        assert format_of(other) is None, other


def test_the_conversation_leaves_the_frameworks_own_system_text_out():
    body = {"messages": [{"role": "system", "content": "framework"}, {"role": "user", "content": "hi"}]}
    assert conversation("openai-chat", body) == [{"role": "user", "content": "hi"}]
    assert conversation("openai-responses", {"input": "hi"}) == [{"role": "user", "content": "hi"}]
    developer = {"type": "message", "role": "developer", "content": "x"}
    assert conversation("openai-responses", {"input": [developer, {"type": "reasoning", "id": "r"}]}) == [
        {"type": "reasoning", "id": "r"}
    ]
    with pytest.raises(ValueError, match="no messages list"):
        conversation("anthropic", {"messages": None})


def test_the_pinned_request_wins_and_only_what_it_lacks_is_kept():
    request = {"model": "m-1", "system": "pinned", "tools": [{"name": "t"}], "messages": [1], "max_tokens": 512}
    body = {
        "model": "other",
        "system": "framework",
        "tools": [{"name": "f"}],
        "messages": [2],
        "max_completion_tokens": 9,
        "stream": False,
        "tool_choice": {"type": "auto"},
        "prompt_cache_key": "k",
    }
    assert merged(request, body) == {**request, "stream": False, "tool_choice": {"type": "auto"}}
    # No pinned tools: the framework's tool_choice would name tools the request does not have.
    assert merged({"model": "m-1", "messages": []}, {"tool_choice": "auto", "parallel_tool_calls": True}) == {
        "model": "m-1",
        "messages": [],
    }
    # No pinned limit: the framework's stays.
    assert merged({"model": "m-1"}, {"max_completion_tokens": 9})["max_completion_tokens"] == 9


def test_each_reply_goes_to_the_next_turn_as_invoked_and_response_in_the_same_format():
    rewriter = Rewriter()
    assert rewriter.turn_arguments("anthropic", {}) == {"format": "anthropic"}
    reply = {"content": [{"type": "tool_use", "name": "a"}, {"type": "text"}, {"type": "tool_use", "name": "b"}]}
    rewriter.replied("anthropic", json.dumps(reply).encode())
    assert rewriter.turn_arguments("anthropic", {}) == {"format": "anthropic", "invoked": ["a", "b"], "response": reply}
    assert rewriter.turn_arguments("openai-chat", {}) == {"format": "openai-chat"}  # another format: not its reply
    rewriter.replied("anthropic", b"data: {}")  # a stream is not kept
    assert rewriter.turn_arguments("anthropic", {}) == {"format": "anthropic"}
    chat = {"choices": [{"message": {"tool_calls": [{"function": {"name": "c"}}]}}]}
    assert tool_names("openai-chat", chat) == ["c"]
    assert tool_names("openai-responses", {"output": [{"type": "function_call", "name": "d"}]}) == ["d"]


def test_the_frameworks_model_goes_to_the_turn_only_when_the_version_names_none():
    body = {"model": "gpt-5", "messages": []}
    assert Rewriter(pinned_model="m-1").turn_arguments("openai-chat", body) == {"format": "openai-chat"}
    assert Rewriter().turn_arguments("openai-chat", body) == {"format": "openai-chat", "model": "gpt-5"}
    assert Rewriter().turn_arguments("openai-chat", {"messages": []}) == {"format": "openai-chat"}
