"""The turn call in real loops (issue 37, the server side): a conversation in a format's own
shape comes back in that shape, byte for byte; a mixed list is read or refused naming the item;
a model is always sent; windows are valid or refused; the per-turn text has a field of its own;
the breakpoints stay within Anthropic's lookback. Every request answered 200 here is checked
against the provider stand-in's rules (devtools/provider_standin.py)."""

import copy
import json
from typing import Any

import pytest
from promptreg._core import turn_conversation

from devtools.provider_standin import Call, Reply, StandIn, check
from tests.turns.test_turn import World, tool_exchange, turn_content, user
from turns import providers

RESPONSES_HISTORY: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Is this parcel damaged?"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "low",
            },
        ],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-opaque-1"},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "process_refund",
        "arguments": '{"order_id": "42"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "refunded"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Refunded.", "annotations": []}],
    },
    {"role": "user", "content": "thanks, and the invoice?"},
]
ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"type": "text", "text": "refund this"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The order is 42.", "signature": "EqQBCkYIBxgCKkA-sig"},
            {
                "type": "text",
                "text": "Order 42 qualifies.",
                "citations": [
                    {
                        "type": "char_location",
                        "cited_text": "42",
                        "document_index": 0,
                        "start_char_index": 0,
                        "end_char_index": 2,
                    }
                ],
            },
            {"type": "tool_use", "id": "toolu_1", "name": "process_refund", "input": {"order_id": "42"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "refunded"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    {"role": "user", "content": "thanks"},
]
GEMINI_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "refund this"}, {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
    {
        "role": "model",
        "parts": [
            {"text": "Checking.", "thoughtSignature": "c2lnbmF0dXJl"},
            {"functionCall": {"id": "fc_1", "name": "process_refund", "args": {"order_id": "42"}}},
        ],
    },
    {
        "role": "user",
        "parts": [{"functionResponse": {"id": "fc_1", "name": "process_refund", "response": {"result": "ok"}}}],
    },
    {"role": "model", "parts": [{"text": "Refunded."}]},
    {"role": "user", "parts": [{"text": "thanks"}]},
]
BEDROCK_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"text": "refund this"}, {"image": {"format": "png", "source": {"bytes": "iVBO"}}}]},
    {
        "role": "assistant",
        "content": [
            {"reasoningContent": {"reasoningText": {"text": "Order 42.", "signature": "sig-1"}}},
            {"toolUse": {"toolUseId": "tu_1", "name": "process_refund", "input": {"order_id": "42"}}},
        ],
    },
    {
        "role": "user",
        "content": [{"toolResult": {"toolUseId": "tu_1", "content": [{"text": "ok"}], "status": "success"}}],
    },
    {"role": "assistant", "content": [{"text": "Refunded."}]},
    {"role": "user", "content": [{"text": "thanks"}]},
]
HISTORIES = {
    "openai-responses": RESPONSES_HISTORY,
    "anthropic": ANTHROPIC_HISTORY,
    "gemini": GEMINI_HISTORY,
    "bedrock-converse": BEDROCK_HISTORY,
}


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


def post(world: World, body: dict[str, Any]):
    return world.agent.post(f"/api/v1/sessions/{world.session}/turn/", body)


def accepted(world: World, body: dict[str, Any]) -> dict[str, Any]:
    response = post(world, body)
    assert response.status_code == 200, response.content
    answer = response.json()
    if "request" in answer:
        assert check(answer["format"], answer["request"]) == [], answer["request"]
    return answer


def refused(world: World, body: dict[str, Any]) -> dict[str, Any]:
    response = post(world, body)
    assert response.status_code == 400, response.content
    return response.json()["error"]


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


# --- round trip ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(HISTORIES))
def test_a_conversation_in_its_formats_shape_comes_back_in_that_shape_byte_for_byte(world, fmt):
    """Reasoning items with encrypted_content, images, thinking blocks with signatures,
    citations, thought signatures, ids: the answer's messages are the items sent, and the
    request sends them unchanged before the per-turn text."""
    history = copy.deepcopy(HISTORIES[fmt])
    answer = accepted(world, {"messages": history, "format": fmt})
    assert "messages" not in answer  # the conversation is in `request` only
    back = unmarked(turn_conversation(fmt, answer["request"], answer["turn_text"]))
    assert back[:-1] == history[:-1] and len(back) == len(history)  # the newest: as below
    conversation = answer["request"][providers.STABLE[fmt][1]]
    sent = unmarked(conversation)
    kept = len(history) if fmt == "openai-responses" else len(history) - 1  # the per-turn text: its own item
    assert json.dumps(sent[:kept]) == json.dumps(history[:kept])  # the history, in the bytes sent
    # the newest message: as sent, then the per-turn text (anthropic makes its text content one block)
    newest = history[-1]
    if fmt == "openai-responses":
        assert sent[-2] == newest and sent[-1] == {"role": "user", "content": answer["turn_text"]}
    elif fmt == "anthropic":
        assert sent[-1]["content"] == [
            {"type": "text", "text": "thanks"},
            {"type": "text", "text": answer["turn_text"]},
        ]
    elif fmt == "gemini":
        assert sent[-1]["parts"] == [*newest["parts"], {"text": answer["turn_text"]}]
    else:
        assert sent[-1]["content"] == [*newest["content"], {"text": answer["turn_text"]}]


def test_the_readme_loop_mixes_the_neutral_answer_with_responses_items_and_keeps_every_call(world):
    """Issue 37, problem 1: the answer's neutral messages (a chat tool call and its result) and
    then the SDK's Responses items. The call and its id survive; nothing is sent with an empty
    call_id."""
    neutral = [user("refund order 42"), *tool_exchange(1), {"role": "assistant", "content": "Done."}]
    items = [
        user("and order 43?"),
        {"type": "function_call", "call_id": "call_9", "name": "process_refund", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_9", "output": "refunded"},
        user("thanks"),
    ]
    answer = accepted(world, {"messages": [*neutral, *items], "format": "openai-responses"})
    sent = answer["request"]["input"]
    calls = [i for i in sent if i.get("type") == "function_call"]
    outputs = [i for i in sent if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == ["call_1", "call_9"] == [o["call_id"] for o in outputs]
    assert sent[-4:-1] == items[1:]  # the Responses items, as sent


@pytest.mark.parametrize("fmt", ["gemini", "bedrock-converse"])
def test_a_mixed_list_is_read_for_gemini_and_bedrock_too(world, fmt):
    """The same mix with Gemini or Converse items was 400 'The conversation has no user message.'"""
    native = copy.deepcopy(HISTORIES[fmt])
    mixed = [user("refund order 42"), *tool_exchange(1), {"role": "assistant", "content": "Done."}, *native]
    answer = accepted(world, {"messages": mixed, "format": fmt})
    key = providers.STABLE[fmt][1]
    sent = json.dumps(unmarked(answer["request"][key]))
    assert sent.count("refunded 10 EUR") == 5  # the neutral call's result
    if fmt == "bedrock-converse":  # (Gemini pairs a call and its result by the function's name)
        assert sent.count('"call_1"') == 2
    assert json.dumps(native[1:-1])[1:-1] in sent  # the native items, as sent


@pytest.mark.parametrize(
    ("fmt", "item", "path"),
    [
        ("openai-responses", {"type": "web_search_call", "id": "ws_1"}, "messages[1].type"),
        (
            "openai-responses",
            {"type": "message", "role": "user", "content": [{"type": "text", "text": "x"}]},
            "messages[1].content[0]",
        ),
        ("openai-responses", {"type": "function_call_output", "call_id": "", "output": "x"}, "messages[1].call_id"),
        ("gemini", {"role": "model", "parts": [{"mystery": 1}]}, "messages[1].parts[0]"),
        ("gemini", {"role": "system", "parts": [{"text": "x"}]}, "messages[1].role"),
        (
            "bedrock-converse",
            {"role": "assistant", "content": [{"text": "x"}, {"type": "text", "text": "y"}]},
            "messages[1]",
        ),
        ("bedrock-converse", {"robot": True}, "messages[1]"),
    ],
)
def test_an_item_that_fits_neither_shape_is_refused_naming_it(world, fmt, item, path):
    error = refused(world, {"messages": [user("hi"), item, user("and?")], "format": fmt})
    assert path in error["details"], error


def test_a_chat_image_is_carried_into_responses_never_dropped(world):
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}}
    answer = accepted(
        world,
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}],
            "format": "openai-responses",
        },
    )
    first = answer["request"]["input"][0]
    assert {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"} in first["content"]
    error = refused(
        world,
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_audio_x", "data": "x"}, {"type": "text", "text": "y"}]}
            ],
            "format": "gemini",
        },
    )
    assert "messages" in error["details"]


# --- the model --------------------------------------------------------------------------------------


def test_a_version_without_a_model_needs_the_calls_model_or_is_a_400_naming_it(world):
    doc = turn_content()
    doc["model"] = {"max_tokens": 100}
    world.publish(doc)
    session = world.agent.post("/api/v1/sessions/", {"bundle": "support", "version": 2}).json()["id"]
    for fmt in providers.FORMATS:
        response = world.agent.post(f"/api/v1/sessions/{session}/turn/", {"messages": [user("hi")], "format": fmt})
        assert response.status_code == 400 and "model" in response.json()["error"]["details"], fmt
        given = world.turn({"messages": [user("hi")], "format": fmt, "model": "m-7"}, session)["request"]
        assert (given.get("model") or given.get("modelId")) == "m-7"
        assert check(fmt, given) == []
    assert world.turn({"messages": [user("hi")]}, session)["messages"]  # no format: no request, no model needed


def test_the_calls_model_is_within_what_the_version_allows(world):
    assert refused(world, {"messages": [user("hi")], "format": "anthropic", "model": "gpt-5"})["details"]["model"]
    assert refused(world, {"messages": [user("hi")], "format": "anthropic", "model": ""})["details"]["model"]
    same = accepted(world, {"messages": [user("hi")], "format": "anthropic", "model": "claude-sonnet-4-6"})
    assert same["request"]["model"] == "claude-sonnet-4-6"
    doc = turn_content()
    doc["model"]["allowed"] = ["claude-haiku-4-5"]
    world.publish(doc)
    session = world.agent.post("/api/v1/sessions/", {"bundle": "support", "version": 2}).json()["id"]
    body = {"messages": [user("hi")], "format": "anthropic", "model": "claude-haiku-4-5"}
    assert world.turn(body, session)["request"]["model"] == "claude-haiku-4-5"


# --- windows ----------------------------------------------------------------------------------------


ASSISTANT_FIRST = [{"role": "assistant", "content": "Hello."}, user("hi")]
ORPHAN_RESULT = [user("hi"), tool_exchange(1)[1], user("and?")]
UNANSWERED_CALL = [user("hi"), tool_exchange(1)[0], user("and?")]
RESULT_FIRST = [tool_exchange(1)[1], user("and?")]


@pytest.mark.parametrize("fmt", providers.FORMATS)
@pytest.mark.parametrize(
    ("messages", "index", "user_first_only"),
    [(ASSISTANT_FIRST, 0, True), (ORPHAN_RESULT, 1, False), (UNANSWERED_CALL, 1, False), (RESULT_FIRST, 0, False)],
)
def test_a_window_the_provider_refuses_is_a_400_naming_the_message_and_how_to_cut(
    world, fmt, messages, index, user_first_only
):
    body = {"messages": messages, "format": fmt}
    if user_first_only and fmt.startswith("openai"):
        accepted(world, body)  # OpenAI takes a conversation that starts with the assistant
        return
    error = refused(world, body)
    detail = error["details"][f"messages[{index}]"]
    assert any("`window`" in line for line in detail), error


@pytest.mark.parametrize("fmt", providers.FORMATS)
def test_the_window_field_cuts_a_valid_window_never_between_a_call_and_its_result(world, fmt):
    long = [user("q0")]
    for n in range(300):
        long += [*tool_exchange(n), {"role": "assistant", "content": f"a{n}"}, user(f"q{n + 1}")]
    assert len(long) > 500
    error = refused(world, {"messages": long, "format": fmt})
    assert "`window`" in error["details"]["messages"][0]
    answer = accepted(world, {"messages": long, "format": fmt, "window": 6})
    window = turn_conversation(fmt, answer["request"], answer["turn_text"])
    # the last six are [call, result, assistant, user, ...]: the window starts at the user message
    assert window[0]["role"] == "user"
    assert len(window) <= 6
    assert refused(world, {"messages": long, "format": fmt, "window": 0})["details"]["window"]
    no_start = [user("q"), *tool_exchange(1)]
    assert refused(world, {"messages": no_start, "format": fmt, "window": 2})["details"]["window"]


def test_the_413_says_to_compact_locally_first(world):
    big = {"messages": [user("x" * (2 * 1024 * 1024 + 10))], "format": "anthropic"}
    response = post(world, big)
    assert response.status_code == 413
    assert "local=True" in response.json()["error"]["details"]["body"][0]


# --- the per-turn text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", providers.FORMATS)
def test_the_per_turn_text_has_its_own_field_and_is_what_the_request_ends_with(world, fmt):
    answer = accepted(world, {"messages": [user("I want a refund for order 42")], "format": fmt})
    text = answer["turn_text"]
    assert text.startswith("Current date: ") and "Skills for this turn:" in text
    assert json.dumps(answer["request"]).count(json.dumps(text)) == 1
    assert accepted(world, {"messages": [user("hi")]})["turn_text"].startswith("Current date: ")


# --- cache lookback -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["anthropic", "bedrock-converse"])
def test_a_turn_of_twelve_parallel_calls_still_reads_the_previous_turn_from_the_cache(world, fmt):
    """Issue 37, problem 9: the previous breakpoint 25 blocks back was past the lookback."""
    key = providers.STABLE[fmt][1]
    with StandIn(lambda f, b, n: Reply(text="ok")) as provider:
        conversation: list[dict[str, Any]] = [user("check my orders")]
        first = accepted(world, {"messages": conversation, "format": fmt})
        provider.handle(_path(fmt), json.dumps(_wire(fmt, first["request"])).encode())
        calls = [
            {"id": f"c{k}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for k in range(12)
        ]
        conversation = [
            *conversation,
            {"role": "assistant", "content": None, "tool_calls": calls},
            *[{"role": "tool", "tool_call_id": f"c{k}", "content": f"order {k}"} for k in range(12)],
            {"role": "assistant", "content": "All twelve shipped."},
            user("thanks"),
        ]
        second = accepted(world, {"messages": conversation, "format": fmt})
        assert sum(1 for _ in json.dumps(second["request"][key]).split('"cache_control"')[1:]) <= 3
        provider.handle(_path(fmt), json.dumps(_wire(fmt, second["request"])).encode())
        assert provider.refused == []
        before, after = provider.received[0].usage, provider.received[1].usage
        assert after["read"] >= before["read"] + before["write"] > 0


def _path(fmt: str) -> str:
    return "/v1/messages" if fmt == "anthropic" else "/model/claude-sonnet-4-5/converse"


def _wire(fmt: str, request: dict[str, Any]) -> dict[str, Any]:
    return request if fmt == "anthropic" else {k: v for k, v in request.items() if k != "modelId"}


def test_the_stand_in_refuses_what_the_providers_refuse():
    """The stand-in's rules, one broken request per rule (so a loop that passes means something)."""
    good = {"model": "m", "max_tokens": 10, "messages": [user("hi")]}
    assert check("anthropic", good) == []
    assert check("anthropic", {**good, "model": None})
    assert check("anthropic", {**good, "messages": [{"role": "assistant", "content": "x"}]})
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}
    assert check("anthropic", {**good, "messages": [user("hi"), use, user("no result")]})
    marked = [{"type": "text", "text": f"{i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    assert check("anthropic", {**good, "messages": [{"role": "user", "content": marked}]})
    assert check("openai-chat", {"model": "m", "messages": [user("hi"), tool_exchange(1)[1]]})
    assert check("openai-chat", {"model": "m", "messages": [user("hi"), tool_exchange(1)[0], user("x")]})
    orphan = {"type": "function_call_output", "call_id": "", "output": "x"}
    assert check("openai-responses", {"model": "m", "input": [user("hi"), orphan]})
    assert check("gemini", {"model": "m", "contents": [{"role": "model", "parts": [{"text": "x"}]}]})
    call = {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}
    assert check("gemini", {"model": "m", "contents": [{"role": "user", "parts": [{"text": "x"}]}, call]})
    assert check("bedrock-converse", {"modelId": "m", "messages": [user("hi"), user("again")]})
    assert check("bedrock-converse", {"modelId": "", "messages": [{"role": "user", "content": [{"text": "x"}]}]})
    with StandIn(lambda f, b, n: Reply(calls=[Call("f")], reasoning=True)) as provider:
        status, _headers, payload = provider.handle("/v1/responses", json.dumps({"model": "m", "input": "hi"}).encode())
        assert status == 200 and payload["output"][0]["type"] == "reasoning"
        forged = {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "forged"}
        status, _headers, payload = provider.handle(
            "/v1/responses",
            json.dumps({"model": "m", "input": [user("hi"), forged, {"role": "assistant", "content": "x"}]}).encode(),
        )
        assert status == 400 and "could not be verified" in payload["error"]["message"]
