"""The Python client with the SDKs and agent frameworks (issue 37), each run as docs/client.md
shows it (its `client-example` blocks, as written, in a process of their own) against the real
registry (tests/live.py) and the project's provider stand-in (devtools/provider_standin.py):
`session.step` with the Anthropic SDK, the OpenAI Agents SDK with a pinned session
(promptreg.openai_agents), pydantic-ai (promptreg.pydantic_ai), LangChain; and the file tools
the adapters serve (`session.file_tool`)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from promptreg import NotFound, Registry
from pydantic import Field

from registry.services import bundle_create, label_move, version_publish
from skills.models import SkillTurn
from tests.client.test_client_step import provider  # noqa: F401 (fixture)
from tests.conftest import CONTENT_V1, content
from tests.knowledge.test_knowledge_scope import live_world  # noqa: F401 (fixture)
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def _example(marker: str) -> str:
    docs = (ROOT / "docs" / "client.md").read_text()
    found = re.search(rf"<!-- client-example: {marker} -->\n```python\n(.*?)^```", docs, re.M | re.S)
    assert found, f"docs/client.md has no example {marker}"
    return found.group(1)


def test_the_documented_agents_sdk_example_runs_a_pinned_loop(registry_server, agent, production, provider, tmp_path):  # noqa: F811
    example = _example("openai-agents")
    assert len([line for line in example.splitlines() if line.strip()]) <= 15  # the bound
    script = tmp_path / "agent.py"
    script.write_text(example)
    env = {
        **os.environ,
        "REGISTRY_URL": registry_server.url,
        "AGENT_KEY": agent.secret,
        "OPENAI_BASE_URL": f"{provider.url}/v1",
        "OPENAI_API_KEY": "test",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",  # no trace export to a network this test has not
        "PYTHONPATH": str(ROOT / "client"),
    }
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "Refunded."
    assert provider.refused == []
    first, second = (received.body for received in provider.received)
    # The pinned prefix went out unchanged on both calls: instructions, and the tools as pinned
    # (`strict: false`, the schema as published; not the SDK's strict rewrite).
    assert second["instructions"] == first["instructions"] and second["tools"] == first["tools"]
    assert (
        first["tools"][0]["strict"] is False
        and first["tools"][0]["parameters"] == CONTENT_V1["tools"][0]["input_schema"]
    )
    assert second["prompt_cache_key"] == first["prompt_cache_key"]
    # The tool ran (the Runner's output went back), and the call it answers is in the input.
    outputs = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [("call_0_0", "done")]
    # Two model calls, two registry turns; the second reported what the model called in the first.
    turns = list(SkillTurn.objects.order_by("number").values_list("number", "invoked"))
    assert turns == [(1, ["process_refund"]), (2, None)]


def _run_example(marker: str, env: dict[str, str], tmp_path: Path) -> str:
    script = tmp_path / f"{marker}.py"
    script.write_text(_example(marker))
    env = {**os.environ, **env, "PYTHONPATH": str(ROOT / "client")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_the_documented_step_example_runs_an_anthropic_loop(registry_server, agent, production, provider, tmp_path):  # noqa: F811
    assert len([line for line in _example("anthropic-step").splitlines() if line.strip()]) <= 15
    env = {"REGISTRY_URL": registry_server.url, "AGENT_KEY": agent.secret, "ANTHROPIC_BASE_URL": provider.url}
    out = _run_example("anthropic-step", {**env, "ANTHROPIC_API_KEY": "test"}, tmp_path)
    assert out.strip().splitlines()[-1] == "Refunded." and provider.refused == []
    first, second = (received.body for received in provider.received)
    result = second["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"]) == ("tool_result", "toolu_0_0", "refunded 7")


def test_session_file_tool_reads_the_sessions_knowledge(registry_server, live_world):  # noqa: F811
    with Registry(registry_server.url, live_world.agent.secret) as registry:
        with registry.start_session("support-bot") as session:
            assert session.file_tool("ls", path="knowledge/") == "knowledge/support-kb/"
            assert "Refunds take 5 days." in session.file_tool("read", path="knowledge/support-kb/faq/refunds.md")
            with pytest.raises(NotFound):
                session.file_tool("read", path="knowledge/hr-internal/pay/bands.md")  # outside the key's scope
            with pytest.raises(ValueError, match="tool must be one of"):
                session.file_tool("cat", path="knowledge/")


class Recording(BaseChatModel):
    """A LangChain chat model standing in for yours: it keeps what it was given and asks for
    process_refund once, then answers."""

    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def bind_tools(self, tools, **kwargs):
        self.bound.append(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append(messages)
        if any(isinstance(m, ToolMessage) for m in messages):
            reply = AIMessage("Refunded.")
        else:
            reply = AIMessage("", tool_calls=[{"id": "call_0_0", "name": "process_refund", "args": {"order_id": "7"}}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_the_documented_langchain_example_runs_a_pinned_loop(registry_server, agent, production):  # noqa: F811
    example = _example("langchain")
    assert len([line for line in example.splitlines() if line.strip()]) <= 15
    namespace: dict = {}
    exec(compile(example, "docs/client.md:langchain", "exec"), namespace)
    model = Recording()
    with Registry(registry_server.url, agent.secret) as registry:
        with registry.start_session("refunds") as session:
            answer = namespace["run"](session, model, {"process_refund": lambda order_id, **_: f"refunded {order_id}"})
    assert answer == "Refunded."
    first, second = model.seen
    # The pinned system prompt first, the conversation, then this turn's text; the pinned tools
    # bound unchanged, the same on both calls.
    assert isinstance(first[0], SystemMessage) and first[0].content == CONTENT_V1["system_prompt"]
    assert second[0].content == first[0].content and model.bound[0] == model.bound[1]
    assert model.bound[0][0]["function"]["parameters"] == CONTENT_V1["tools"][0]["input_schema"]
    assert [type(m).__name__ for m in second][:4] == ["SystemMessage", "HumanMessage", "AIMessage", "ToolMessage"]
    assert second[3].content == "refunded 7" and second[2].tool_calls[0]["id"] == "call_0_0"
    turns = list(SkillTurn.objects.order_by("number").values_list("number", "invoked"))
    assert turns == [(1, ["process_refund"]), (2, None)]


def test_the_documented_pydantic_ai_example_runs_a_pinned_loop(
    registry_server,  # noqa: F811
    agent,
    production,
    provider,  # noqa: F811
    monkeypatch,
    capsys,
):
    """As written, in this process (pydantic-ai's imports are the example's slow part)."""
    example = _example("pydantic-ai")
    assert len([line for line in example.splitlines() if line.strip()]) <= 15
    env = {"REGISTRY_URL": registry_server.url, "AGENT_KEY": agent.secret, "ANTHROPIC_BASE_URL": provider.url}
    for name, value in {**env, "ANTHROPIC_API_KEY": "test"}.items():
        monkeypatch.setenv(name, value)
    exec(compile(example, "docs/client.md:pydantic-ai", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip().splitlines()[-1] == "Refunded." and provider.refused == []
    first, second, third = (received.body for received in provider.received)
    # The pinned prefix on every call: the system prompt and the tool as published.
    assert first["system"] == second["system"] == third["system"] and "process_refund" in str(first["system"])
    assert (
        first["tools"] == third["tools"] and first["tools"][0]["input_schema"] == CONTENT_V1["tools"][0]["input_schema"]
    )
    result = second["messages"][2]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_0_0")
    # The second question went on from the first one's conversation.
    assert third["messages"][:2] == second["messages"][:2]
    assert third["messages"][2]["content"][0]["tool_use_id"] == "toolu_0_0"
    turns = list(SkillTurn.objects.order_by("number").values_list("number", "invoked"))
    assert turns == [(1, ["process_refund"]), (2, []), (3, None)]


def test_a_version_without_a_model_takes_the_frameworks(registry_server, agent, ops, provider):  # noqa: F811
    """The turn call needs a model for a provider request: when the version names none, the
    pydantic-ai adapter sends the framework's (`model_name=`), and the request names it."""
    from promptreg.pydantic_ai import registry_agent

    doc = content()
    del doc["model"]
    bundle = bundle_create(name="modelless", description="d", actor=ops.actor)
    version = version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="go")
    with Registry(registry_server.url, agent.secret) as registry:
        with registry.start_session("modelless") as session:
            tools = {"process_refund": lambda order_id, **_: "done"}
            chat = registry_agent(
                session,
                "openai-chat",
                tools=tools,
                model_name="gpt-4.1",
                api_key="t",
                base_url=f"{provider.url}/v1",
            )
            assert chat.run_sync("Refund order 7, please.").output == "Refunded."
            with pytest.raises(ValueError, match="names no model"):
                registry_agent(session, "anthropic", tools=tools)
    assert provider.refused == [] and [r.body["model"] for r in provider.received] == ["gpt-4.1"] * 2
