"""The Python client with the official SDKs (issue 37, item 4): `session.turn(messages)` takes
the SDKs' own objects, and `session.step(client, messages)` sends the turn's request with an
`anthropic` / `openai` client and appends the reply. The registry is the real service
(tests/live.py); the provider is the project's stand-in (devtools/provider_standin.py), which
refuses what each provider refuses; it answers a tool call first, then text."""

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall
from openai.types.responses import ResponseFunctionToolCall, ResponseReasoningItem
from promptreg import AsyncRegistry, Registry

from devtools.provider_standin import Call, Reply, StandIn
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def script(fmt: str, body: dict[str, Any], n: int) -> Reply:
    """A tool call first (with a reasoning item on Responses), then "Refunded."."""
    if n == 0:
        return Reply(calls=[Call("process_refund", {"order_id": "7"})], reasoning=fmt == "openai-responses")
    return Reply(text="Refunded.")


@pytest.fixture
def provider() -> Iterator[StandIn]:
    with StandIn(script=script) as server:
        yield server


def bodies(provider: StandIn) -> list[dict[str, Any]]:
    return [received.body for received in provider.received]


# --- the tests ------------------------------------------------------------------------------


@pytest.fixture
def registry(registry_server, agent, production) -> Iterator[Registry]:  # noqa: F811
    with Registry(registry_server.url, agent.secret) as client:
        yield client


def test_turn_takes_the_sdks_objects_as_their_docs_append_them(registry):
    """Anthropic blocks and a whole Message, a ChatCompletionMessage, Responses items: before,
    `TypeError: Object of type TextBlock is not JSON serializable`."""
    use = ToolUseBlock(type="tool_use", id="toolu_01", name="process_refund", input={"order_id": "7"})
    reply = Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="m-1",
        content=[TextBlock(type="text", text="Checking."), use],
        stop_reason="tool_use",
        stop_sequence=None,
        usage={"input_tokens": 1, "output_tokens": 1},
    )
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "done"}]}
    call = ChatCompletionMessageFunctionToolCall(
        id="call_1", type="function", function={"name": "process_refund", "arguments": '{"order_id": "7"}'}
    )
    chat = ChatCompletionMessage(role="assistant", content=None, tool_calls=[call])
    reasoning = ResponseReasoningItem(id="rs_1", type="reasoning", summary=[], encrypted_content="gAAA")
    function_call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="process_refund", arguments="{}", id="fc_1"
    )
    with registry.start_session("refunds") as session:
        user = {"role": "user", "content": "Refund order 7, please."}
        blocks = session.turn([user, {"role": "assistant", "content": [use]}, result], format="anthropic")
        whole = session.turn([user, reply, result], format="anthropic")
        session.turn([user, chat, {"role": "tool", "tool_call_id": "call_1", "content": "done"}], format="openai-chat")
        session.route([user, chat])
        assert session.compact([user, chat], local=True)["messages"][1]["tool_calls"][0]["id"] == "call_1"
        output = {"type": "function_call_output", "call_id": "call_1", "output": "done"}
        carried = session.turn([user, reasoning, function_call, output], format="openai-responses")
        # The reasoning item is carried, with its encrypted_content (issue 37, item 2).
        assert carried["messages"][1] == {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
    # A whole Message is sent as the message it stands for: role and content, nothing else.
    sent = whole["request"]["messages"][1]
    assert sent["role"] == "assistant" and [b["type"] for b in sent["content"]][:2] == ["text", "tool_use"]
    assert "usage" not in sent and "id" not in sent
    assert whole["request"]["messages"] == blocks["request"]["messages"][:1] + [sent] + whole["request"]["messages"][2:]


def test_turn_names_the_item_it_cannot_send(registry):
    with registry.start_session("refunds") as session:
        with pytest.raises(TypeError, match=r"messages\[1\]\.content\[0\]: an object of type object is not JSON"):
            session.turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [object()]}])


def test_step_runs_an_anthropic_loop_through_the_sdk(registry, provider):
    client = anthropic.Anthropic(base_url=provider.url, api_key="test", max_retries=0)
    messages: list = [{"role": "user", "content": "Refund order 7, please."}]
    with registry.start_session("refunds") as session:
        step = session.step(client, messages)
        assert [(c.id, c.name, c.arguments) for c in step.tool_calls] == [
            ("toolu_0_0", "process_refund", {"order_id": "7"})
        ]
        step = session.step(client, step.with_tool_results({"toolu_0_0": "refunded 7"}))
    assert step.done and step.text == "Refunded." and provider.refused == []
    first, second = bodies(provider)
    assert second["model"] == "m-1" and second["tools"] == first["tools"] and second["system"] == first["system"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert step.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Refunded."}]}


def test_step_runs_an_openai_chat_loop_through_the_sdk(registry, provider):
    client = openai.OpenAI(base_url=f"{provider.url}/v1", api_key="test", max_retries=0)
    with registry.start_session("refunds") as session:
        step = session.step(client, [{"role": "user", "content": "Refund order 7."}], format="openai-chat")
        assert [c.id for c in step.tool_calls] == ["call_0_0"]
        step = session.step(client, step.with_tool_results({"call_0_0": "refunded"}), format="openai-chat")
    assert step.done and step.text == "Refunded." and provider.refused == []
    first, second = bodies(provider)
    assert second["messages"][0] == first["messages"][0] and second["messages"][0]["role"] == "system"
    assert {"role": "tool", "tool_call_id": "call_0_0", "content": "refunded"} in second["messages"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_0_0"


def test_step_runs_an_openai_responses_loop_and_sends_the_reasoning_back(registry, provider):
    client = openai.OpenAI(base_url=f"{provider.url}/v1", api_key="test", max_retries=0)
    with registry.start_session("refunds") as session:
        step = session.step(client, [{"role": "user", "content": "Refund order 7."}], format="openai-responses")
        assert [i["type"] for i in step.messages[-2:]] == ["reasoning", "function_call"]
        step = session.step(client, step.with_tool_results({"call_0_0": "refunded"}), format="openai-responses")
    assert provider.refused == [], provider.refused
    assert step.done and step.text == "Refunded."
    first, second = bodies(provider)
    # The reasoning item went back with the encrypted_content the provider issued.
    assert [i.get("type") for i in second["input"]].count("reasoning") == 1
    assert second["instructions"] == first["instructions"] and second["tools"] == first["tools"]


def test_step_with_an_async_client(registry_server, agent, production, provider):  # noqa: F811
    async def loop() -> str:
        client = anthropic.AsyncAnthropic(base_url=provider.url, api_key="test", max_retries=0)
        async with AsyncRegistry(registry_server.url, agent.secret) as registry:
            async with await registry.start_session("refunds") as session:
                step = await session.step(client, [{"role": "user", "content": "Refund order 7."}])
                step = await session.step(client, step.with_tool_results({c.id: "ok" for c in step.tool_calls}))
                return step.text

    assert asyncio.run(loop()) == "Refunded." and provider.refused == []


def test_step_refuses_an_unknown_client_a_missing_format_and_a_pinned_key(registry, provider):
    messages = [{"role": "user", "content": "hi"}]
    with registry.start_session("refunds") as session:
        with pytest.raises(TypeError, match="anthropic or openai client"):
            session.step(object(), messages)
        with pytest.raises(ValueError, match="format='openai-responses' or format='openai-chat'"):
            session.step(openai.OpenAI(base_url=provider.url, api_key="t"), messages)
        with pytest.raises(ValueError, match="tools: part of the pinned request"):
            session.step(anthropic.Anthropic(base_url=provider.url, api_key="t"), messages, tools=[])
    assert provider.received == []
