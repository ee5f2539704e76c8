"""Real agent loops through the client's framework adapters (issue 37): a pydantic-ai Agent
(promptreg.pydantic_ai) and the Vercel AI SDK (the TypeScript client's `registryFetch`), each a
conversation of several user questions and ten model calls with tool calls (twelve at once in
one), every request laid out by the turn call of a live registry server and sent to the provider
stand-in (devtools/provider_standin.py), which refuses what the provider's rules refuse.

Each loop checks what tests/test_real_loops.py checks of the SDK loops: the provider refused
nothing; the stable prefix is the same bytes on every request; every request's conversation
starts with the previous one's (less its newest entry, which held the per-turn text); Anthropic
reads the previous turn from the cache on every call. And what the adapter adds: the pinned
tools ran by the caller's functions, what the model called is reported as `invoked`, and each
reply as the next turn's evidence."""

import asyncio
import json
import os
import subprocess
from typing import Any

import pytest
from promptreg import AsyncRegistry, Registry

from devtools.provider_standin import Call, Reply, StandIn
from skills.models import SkillTurn
from tests.live import registry_server  # noqa: F401 (fixture)
from tests.test_real_loops import CONVERSATION, STABLE_KEYS, canonical, world  # noqa: F401 (fixture)
from tests.test_typescript_client import NO_NODE, NODE, PACKAGE, built  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = 10  # model calls in each loop
QUESTIONS = 5  # user questions: each runs the agent until it answers without a tool call
WIDE = 4  # the model call that makes twelve parallel tool calls


def script(fmt: str, body: dict[str, Any], n: int) -> Reply:
    """Odd calls answer; even ones call process_refund (twelve times at once on WIDE), so each
    question takes two model calls; a reasoning item on every fourth."""
    reasoning = n % 4 == 0
    if n == WIDE:
        return Reply(calls=[Call("process_refund", {"order_id": str(k)}) for k in range(12)], reasoning=reasoning)
    if n % 2 == 0:
        return Reply(text="Let me check.", calls=[Call("process_refund", {"order_id": str(n)})], reasoning=reasoning)
    return Reply(text=f"Answer {n}: refunded.")


def refund(order_id: str, **_: Any) -> str:
    return f"refunded {order_id}"


def check_wire(fmt: str, provider: StandIn) -> None:
    """The checks of tests/test_real_loops.py, on what went over the wire."""
    assert [(r.path, r.problems) for r in provider.refused] == [] and len(provider.received) == CALLS
    requests = [r.body for r in provider.received]
    key = CONVERSATION[fmt]
    for n in range(1, CALLS):
        before, now = requests[n - 1], requests[n]
        for stable in STABLE_KEYS[fmt]:
            assert canonical(now.get(stable)) == canonical(before.get(stable)), (n, stable)
        kept = len(before[key]) - 1
        assert canonical(now[key][:kept]) == canonical(before[key][:kept]), n
    if fmt == "anthropic":
        for n in range(1, CALLS):
            previous, current = provider.received[n - 1].usage, provider.received[n].usage
            assert current["read"] >= previous["read"] + previous["write"], (n, previous, current)


def check_invoked() -> None:
    """Each turn reported what the model called in the previous call as `invoked`."""
    invoked = dict(SkillTurn.objects.values_list("number", "invoked"))
    expected = {n + 1: ["process_refund"] * (n % 2 == 0) for n in range(CALLS - 1)}  # each name once
    assert invoked == {**expected, CALLS: None}, invoked


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat"])
def test_a_pydantic_ai_agent_loop_through_the_pinned_session(world, fmt):  # noqa: F811
    from promptreg.pydantic_ai import registry_agent

    url, secret = world
    ran: list[str] = []
    with StandIn(script) as provider, Registry(url, secret) as registry:
        with registry.start_session("loops") as session:
            base = provider.url if fmt == "anthropic" else f"{provider.url}/v1"
            tools = {"process_refund": lambda order_id, **_: ran.append(order_id) or refund(order_id)}
            agent = registry_agent(session, fmt, tools=tools, api_key="test", base_url=base)
            history: list[Any] = []
            for q in range(QUESTIONS):
                result = agent.run_sync(f"Question {q}: refund my order, please.", message_history=history)
                assert result.output == f"Answer {2 * q + 1}: refunded."
                history = result.all_messages()
    check_wire(fmt, provider)
    assert len(ran) == 4 + 12  # one call on each even model call, twelve on WIDE
    check_invoked()


def test_a_pydantic_ai_agent_on_an_async_session(world):  # noqa: F811
    """The same adapter with `AsyncRegistry` and `await agent.run(...)`: one question, two calls."""
    from promptreg.pydantic_ai import registry_agent

    url, secret = world

    async def main(base_url: str) -> str:
        async with AsyncRegistry(url, secret) as registry:
            async with await registry.start_session("loops") as session:
                tools = {"process_refund": refund}
                agent = registry_agent(session, "anthropic", tools=tools, api_key="test", base_url=base_url)
                return (await agent.run("Refund order 0, please.")).output

    with StandIn(script) as provider:
        assert asyncio.run(main(provider.url)) == "Answer 1: refunded."
    assert provider.refused == [] and len(provider.received) == 2
    result = json.loads(provider.received[1].raw)["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_0_0")
    assert result["content"] in ("refunded 0", [{"type": "text", "text": "refunded 0"}]), result


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat"])
def test_a_vercel_ai_sdk_agent_loop_through_the_pinned_session(built, world, fmt):  # noqa: F811
    """clients/typescript/test/ai-sdk-loop.ts: `generateText` with `registryFetch` and
    `registryTools` (promptreg/ai-sdk), five questions, ten model calls."""
    url, secret = world
    if NODE is None:
        pytest.skip(NO_NODE)  # test_typescript_client's fixture fails instead where CI is set
    with StandIn(script) as provider:
        env = {**os.environ, "REGISTRY_URL": url, "AGENT_KEY": secret, "PROVIDER_URL": provider.url}
        env.update(FORMAT=fmt, QUESTIONS=str(QUESTIONS))
        done = subprocess.run(
            [NODE, str(built / "test" / "ai-sdk-loop.js")],
            cwd=PACKAGE,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["answers"] == [f"Answer {2 * q + 1}: refunded." for q in range(QUESTIONS)]
    assert len(out["ran"]) == 4 + 12 and out["turns"] == CALLS
    check_wire(fmt, provider)
    check_invoked()
