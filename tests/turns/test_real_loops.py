"""Real agent loops (issue 37): for each format, ten model calls through the official SDK
(`anthropic`, `openai` chat and responses, `google-genai`, `boto3` bedrock-runtime), each
request laid out by the turn call of a live registry server, sent to the provider stand-in
(devtools/provider_standin.py), which refuses what the provider's documented rules refuse. The
model's reply is appended the way each SDK's documents show (SDK objects dumped to dicts), tool
results in the format's shape; one turn makes twelve parallel tool calls (issue 37, problem 9).

Each loop checks: the provider refused nothing; the stable prefix is the same bytes on every
request; every request's conversation starts with the previous request's, byte for byte (the
per-turn text and the cache markers aside); Anthropic and Bedrock read the previous turn from
the cache on every turn (the stand-in's lookback); Responses reasoning items come back with
their encrypted_content.

The client's framework adapters run the same kind of loop, with the same checks on the wire
(a pydantic-ai Agent, promptreg.pydantic_ai; the Vercel AI SDK, the TypeScript client's
`registryFetch`): several user questions, ten model calls (six with the OpenAI APIs), twelve
tool calls at once in one; the pinned tools run by the caller's functions, and what the model
called reported as `invoked`.

One registry server and one bundle for the module, and no database flush between the loops
(each starts its own session); the tables are flushed once when the module is done."""

import asyncio
import copy
import gzip
import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from django.core.management import call_command
from promptreg import AsyncRegistry
from promptreg import Registry as Client
from promptreg._core import turn_conversation

from access.models import Role
from devtools.provider_standin import Call, Reply, StandIn
from registry.services import bundle_create, label_move, version_publish
from skills.models import SkillTurn
from tests.client.test_typescript_client import NO_NODE, NODE, PACKAGE, installed
from tests.conftest import content, make_api
from tests.live import registry_server  # noqa: F401 (fixture)
from tests.skills.test_skills import SKILLS

# Each test reads what the server committed; the module's data is made and flushed by `world`.
pytestmark = pytest.mark.django_db

MODELS = {
    "anthropic": "claude-sonnet-4-6",
    "openai-chat": "gpt-6.1-sol",
    "openai-responses": "gpt-6.1-sol",
    "gemini": "gemini-3.8-flash",
    "bedrock-converse": "anthropic.claude-sonnet-4-6-v1:0",
}
TURNS = 10
WIDE_TURN = 4  # the model call that makes twelve parallel tool calls
# Which keys of each request body hold the conversation, and which are the stable prefix.
CONVERSATION = {
    "anthropic": "messages",
    "openai-chat": "messages",
    "openai-responses": "input",
    "gemini": "contents",
    "bedrock-converse": "messages",
}
STABLE_KEYS = {
    "anthropic": ("tools", "system"),
    "openai-chat": ("tools",),
    "openai-responses": ("instructions", "tools"),
    "gemini": ("systemInstruction", "tools"),
    "bedrock-converse": ("system", "toolConfig"),
}


def script(fmt: str, body: dict[str, Any], n: int) -> Reply:
    """The scripted model: a tool call, an answer, ... and on WIDE_TURN twelve calls at once;
    a reasoning item (thinking block, thought signature) on every other call."""
    reasoning = n % 2 == 0
    if n == WIDE_TURN:
        return Reply(calls=[Call("lookup_order", {"order_id": str(k)}) for k in range(12)], reasoning=reasoning)
    if n % 3 == 0:
        return Reply(text="Let me look.", calls=[Call("lookup_order", {"order_id": str(n)})], reasoning=reasoning)
    return Reply(text=f"Answer {n}: the order is on its way.", reasoning=reasoning)


def unmarked(value: Any) -> Any:
    """`value` less the cache markers the registry moves; an Anthropic text content as the one
    text block it stands for (a breakpoint on it is written so; the API reads both the same)."""
    if isinstance(value, dict):
        if value.get("role") in ("user", "assistant") and isinstance(value.get("content"), str) and "type" not in value:
            value = {**value, "content": [{"type": "text", "text": value["content"]}]}
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def canonical(value: Any) -> bytes:
    return json.dumps(unmarked(value), sort_keys=True, separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def flushed_at_the_end(django_db_setup, django_db_blocker) -> Iterator[None]:
    """Every table flushed when the module is done (as after each transactional test), once its
    server has stopped (requested before it, so torn down after it)."""
    yield
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(scope="module")
def world(flushed_at_the_end, registry_server, django_db_blocker) -> tuple[str, str]:  # noqa: F811
    """(registry url, agent secret) with a bundle `loops` at version 1 and `production` on it,
    committed for the module's server."""
    with django_db_blocker.unblock():
        ops = make_api(Role.OPS, name="loops-ops")
        agent = make_api(Role.AGENT, name="loops-agent")
        doc = content(
            "You help the support team. " + "Check the order before answering. " * 60,
            skills=copy.deepcopy(SKILLS),
            compaction={"keep_tool_results": 100, "max_tool_result_chars": 20000},
            model={"name": MODELS["anthropic"], "max_tokens": 512, "allowed": sorted(set(MODELS.values()))},
        )
        bundle = bundle_create(name="loops", description="d", actor=ops.actor)
        version = version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor).version
        label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="go")
    return registry_server.url, agent.secret


class Registry:
    """The registry's turn call over HTTP, as a framework would call it."""

    def __init__(self, url: str, secret: str) -> None:
        self.http = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
        response = self.http.post("/sessions/", json={"bundle": "loops"})
        assert response.status_code == 201, response.text
        self.session = response.json()["id"]

    def turn(self, fmt: str, messages: list[Any]) -> dict[str, Any]:
        body = {"messages": messages, "format": fmt, "model": MODELS[fmt]}
        response = self.http.post(f"/sessions/{self.session}/turn/", json=body)
        assert response.status_code == 200, response.text
        return response.json()


# --- one step per SDK: send the request, give back what to append ------------------------------------


def result_text(name: str, args: dict[str, Any]) -> str:
    return f"{name}({args.get('order_id')}): shipped, arriving Tuesday."


def step_anthropic(url: str, request: dict[str, Any]) -> tuple[list[Any], bool]:
    import anthropic

    client = anthropic.Anthropic(api_key="test", base_url=url, max_retries=0)
    reply = client.messages.create(**request)
    appended: list[Any] = [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}]
    uses = [b for b in reply.content if b.type == "tool_use"]
    if uses:
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": result_text(b.name, dict(b.input))} for b in uses
        ]
        appended.append({"role": "user", "content": results})
    return appended, bool(uses)


def step_openai_chat(url: str, request: dict[str, Any]) -> tuple[list[Any], bool]:
    import openai

    client = openai.OpenAI(api_key="test", base_url=f"{url}/v1", max_retries=0)
    message = client.chat.completions.create(**request).choices[0].message
    appended: list[Any] = [message.model_dump(exclude_none=True)]
    for call in message.tool_calls or []:
        text = result_text(call.function.name, json.loads(call.function.arguments))
        appended.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return appended, bool(message.tool_calls)


def step_openai_responses(url: str, request: dict[str, Any]) -> tuple[list[Any], bool]:
    import openai

    client = openai.OpenAI(api_key="test", base_url=f"{url}/v1", max_retries=0)
    reply = client.responses.create(**request)
    appended: list[Any] = [item.model_dump(exclude_none=True) for item in reply.output]
    calls = [item for item in reply.output if item.type == "function_call"]
    for call in calls:
        text = result_text(call.name, json.loads(call.arguments))
        appended.append({"type": "function_call_output", "call_id": call.call_id, "output": text})
    return appended, bool(calls)


def step_gemini(url: str, request: dict[str, Any]) -> tuple[list[Any], bool]:
    from google import genai
    from google.genai import types

    client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=url))
    config = {**request.get("generationConfig", {}), "systemInstruction": request["systemInstruction"]}
    if "tools" in request:
        config["tools"] = request["tools"]
    reply = client.models.generate_content(model=request["model"], contents=request["contents"], config=config)
    said = reply.candidates[0].content
    appended: list[Any] = [said.model_dump(mode="json", by_alias=True, exclude_none=True)]
    calls = [p.function_call for p in said.parts or [] if p.function_call]
    if calls:
        responses = [
            {"functionResponse": {"id": c.id, "name": c.name, "response": {"result": result_text(c.name, c.args)}}}
            for c in calls
        ]
        appended.append({"role": "user", "parts": responses})
    return appended, bool(calls)


def step_bedrock(url: str, request: dict[str, Any]) -> tuple[list[Any], bool]:
    import boto3

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    message = client.converse(**request)["output"]["message"]
    appended: list[Any] = [message]
    uses = [b["toolUse"] for b in message["content"] if "toolUse" in b]
    if uses:
        results = [
            {"toolResult": {"toolUseId": u["toolUseId"], "content": [{"text": result_text(u["name"], u["input"])}]}}
            for u in uses
        ]
        appended.append({"role": "user", "content": results})
    return appended, bool(uses)


STEPS = {
    "anthropic": step_anthropic,
    "openai-chat": step_openai_chat,
    "openai-responses": step_openai_responses,
    "gemini": step_gemini,
    "bedrock-converse": step_bedrock,
}


def user_says(fmt: str, text: str) -> dict[str, Any]:
    if fmt == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    if fmt == "bedrock-converse":
        return {"role": "user", "content": [{"text": text}]}
    return {"role": "user", "content": text}


@pytest.mark.parametrize("fmt", list(STEPS))
def test_a_ten_turn_agent_loop_through_the_official_sdk(world, fmt):
    url, secret = world
    registry = Registry(url, secret)
    key = CONVERSATION[fmt]
    with StandIn(script) as provider:
        messages: list[Any] = [user_says(fmt, "Where is my order 42? I want a refund otherwise.")]
        requests: list[dict[str, Any]] = []
        for n in range(TURNS):
            answer = registry.turn(fmt, messages)
            assert answer["turn_text"].startswith("Current date: ")
            request = answer["request"]
            requests.append(request)
            appended, called = STEPS[fmt](provider.url, request)
            # the loop as each SDK's documents show it: the answer's conversation (with `format`, in
            # `request` only: docs/api.md's rule, as the clients apply it), the reply, the results
            assert "messages" not in answer
            messages = [*turn_conversation(fmt, request, answer["turn_text"]), *appended]
            if not called:
                messages.append(user_says(fmt, f"Thanks. And question {n}?"))
        refused = [(r.path, r.problems) for r in provider.refused]
        assert refused == [] and len(provider.received) == TURNS

        for n in range(1, TURNS):
            before, now = requests[n - 1], requests[n]
            for stable in STABLE_KEYS[fmt]:  # the stable prefix: the same bytes on every request
                assert canonical(now.get(stable)) == canonical(before.get(stable)), (n, stable)
            # the previous conversation (less its newest entry, which held the per-turn text) starts this one
            kept = len(before[key]) - 1
            assert canonical(now[key][:kept]) == canonical(before[key][:kept]), n
        # what went over the wire is what the registry laid out (the SDK added nothing to the conversation)
        wire = [json.loads(r.raw) for r in provider.received]
        assert all(canonical(w[key]) == canonical(r[key]) for w, r in zip(wire, requests, strict=True))

        if fmt in ("anthropic", "bedrock-converse"):
            # every turn reads the previous one from the cache, the wide turn included (the lookback)
            for n in range(1, TURNS):
                previous, current = provider.received[n - 1].usage, provider.received[n].usage
                assert current["read"] >= previous["read"] + previous["write"], (n, previous, current)
        if fmt == "openai-responses":
            # the reasoning items of every earlier reply are sent back whole, encrypted_content included
            sent = {i["encrypted_content"] for i in requests[-1]["input"] if i.get("type") == "reasoning"}
            assert len(sent) == len([n for n in range(TURNS - 1) if n % 2 == 0]) and sent <= provider.issued


# --- the client's framework adapters ----------------------------------------------------------------

# User questions in an adapter loop (each runs the agent until it answers: two model calls):
# ten calls with Anthropic, whose prompt cache the stand-in models turn by turn; six with the
# OpenAI APIs, which still take in the twelve parallel calls and a reasoning item.
QUESTIONS = {"anthropic": 5, "openai-chat": 3, "openai-responses": 3}


def adapter_script(fmt: str, body: dict[str, Any], n: int) -> Reply:
    """Odd calls answer; even ones call process_refund (twelve times at once on WIDE_TURN), so
    each question takes two model calls; a reasoning item (thinking block) on every fourth."""
    reasoning = n % 4 == 0
    if n == WIDE_TURN:
        return Reply(calls=[Call("process_refund", {"order_id": str(k)}) for k in range(12)], reasoning=reasoning)
    if n % 2 == 0:
        return Reply(text="Let me check.", calls=[Call("process_refund", {"order_id": str(n)})], reasoning=reasoning)
    return Reply(text=f"Answer {n}: refunded.")


def refund(order_id: str, **_: Any) -> str:
    return f"refunded {order_id}"


def check_adapter_loop(fmt: str, provider: StandIn, session: str) -> None:
    """The SDK loops' checks on what went over the wire, and `invoked` reported for each call."""
    calls = 2 * QUESTIONS[fmt]
    assert [(r.path, r.problems) for r in provider.refused] == [] and len(provider.received) == calls
    requests = [r.body for r in provider.received]
    key = CONVERSATION[fmt]
    for n in range(1, calls):
        before, now = requests[n - 1], requests[n]
        for stable in STABLE_KEYS[fmt]:
            assert canonical(now.get(stable)) == canonical(before.get(stable)), (n, stable)
        kept = len(before[key]) - 1
        assert canonical(now[key][:kept]) == canonical(before[key][:kept]), n
    if fmt == "anthropic":
        for n in range(1, calls):
            previous, current = provider.received[n - 1].usage, provider.received[n].usage
            assert current["read"] >= previous["read"] + previous["write"], (n, previous, current)
    invoked = dict(SkillTurn.objects.filter(session_id=session).values_list("number", "invoked"))
    expected = {n + 1: ["process_refund"] * (n % 2 == 0) for n in range(calls - 1)}  # each name once
    assert invoked == {**expected, calls: None}, invoked


@pytest.mark.parametrize("fmt", list(QUESTIONS))
def test_a_pydantic_ai_agent_loop_through_the_pinned_session(world, fmt):
    from promptreg.pydantic_ai import registry_agent

    url, secret = world
    ran: list[str] = []
    with StandIn(adapter_script) as provider, Client(url, secret) as registry:
        with registry.start_session("loops") as session:
            base = provider.url if fmt == "anthropic" else f"{provider.url}/v1"
            tools = {"process_refund": lambda order_id, **_: ran.append(order_id) or refund(order_id)}
            agent = registry_agent(session, fmt, tools=tools, api_key="test", base_url=base)
            history: list[Any] = []
            for q in range(QUESTIONS[fmt]):
                result = agent.run_sync(f"Question {q}: refund my order, please.", message_history=history)
                assert result.output == f"Answer {2 * q + 1}: refunded."
                history = result.all_messages()
    assert len(ran) == QUESTIONS[fmt] - 1 + 12  # one call on each other even model call, twelve on WIDE_TURN
    check_adapter_loop(fmt, provider, session.id)


class Gzipped(httpx2.AsyncBaseTransport):
    """Sends through the real transport and answers gzip-encoded, as the providers' APIs do."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        body = gzip.compress(await response.aread())
        headers = {"content-type": response.headers["content-type"], "content-encoding": "gzip"}
        return httpx2.Response(response.status_code, headers=headers, content=body)


def test_a_pydantic_ai_agent_on_an_async_session_with_an_encoded_reply(world):
    """The adapter with `AsyncRegistry` and `await agent.run(...)`, its model built by hand on
    the transport (`registry_http_client` is this), the provider's replies gzip-encoded: one
    question, two calls."""
    from promptreg.pydantic_ai import RegistryTransport, registry_tools
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    url, secret = world

    async def main(base_url: str) -> str:
        async with AsyncRegistry(url, secret) as registry:
            async with await registry.start_session("loops") as session:
                http = httpx2.AsyncClient(transport=RegistryTransport(session, inner=Gzipped()))
                provider = AnthropicProvider(http_client=http, api_key="test", base_url=base_url)
                model = AnthropicModel("claude-sonnet-4-6", provider=provider)
                tools = registry_tools(session, {"process_refund": refund})
                agent = Agent(model, tools=tools, model_settings={"max_tokens": 512})
                return (await agent.run("Refund order 0, please.")).output

    with StandIn(adapter_script) as provider:
        assert asyncio.run(main(provider.url)) == "Answer 1: refunded."
    assert provider.refused == [] and len(provider.received) == 2
    result = json.loads(provider.received[1].raw)["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_0_0")
    assert result["content"] in ("refunded 0", [{"type": "text", "text": "refunded 0"}]), result


@pytest.mark.parametrize("fmt", list(QUESTIONS))
def test_a_vercel_ai_sdk_agent_loop_through_the_pinned_session(world, fmt):
    """clients/typescript/test/ai-sdk-loop.mjs on the committed dist/: `generateText` with
    `registryFetch` and `registryTools` (promptreg/ai-sdk)."""
    url, secret = world
    if NODE is None:
        pytest.skip(NO_NODE)  # tests/client/test_typescript_client.py fails instead where CI is set
    installed()
    with StandIn(adapter_script) as provider:
        env = {**os.environ, "REGISTRY_URL": url, "AGENT_KEY": secret, "PROVIDER_URL": provider.url}
        env.update(FORMAT=fmt, QUESTIONS=str(QUESTIONS[fmt]))
        script = str(PACKAGE / "test" / "ai-sdk-loop.mjs")
        done = subprocess.run([NODE, script], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["answers"] == [f"Answer {2 * q + 1}: refunded." for q in range(QUESTIONS[fmt])]
    assert len(out["ran"]) == QUESTIONS[fmt] - 1 + 12 and out["turns"] == 2 * QUESTIONS[fmt]
    check_adapter_loop(fmt, provider, out["session"])
