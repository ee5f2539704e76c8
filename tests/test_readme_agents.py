"""The README's agent section, run as written against the real running service: the agent
loop with the client, the push/pull round trip and the MCP server's setup in an agent host."""

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from access.models import Role
from registry.models import Label
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from tests.conftest import content, make_api
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def readme_block(name: str) -> str:
    """The fenced block right after `<!-- readme-test: NAME -->`."""
    found = re.search(rf"<!-- readme-test: {name} -->\n```\w*\n(.*?)```", README, re.S)
    assert found, f"README has no block marked {name}"
    return found.group(1)


@pytest.fixture
def walkthrough_state(db):
    """Where the README's walkthrough leaves the registry: refunds v1 and v2, production -> v1."""
    ops = make_api(Role.OPS, name="readme-ops")
    bundle = bundle_create(name="refunds", description="Refund agent", actor=ops.actor)
    v1 = version_publish(bundle=bundle, content=content(), message="v1", actor=ops.actor).version
    version_publish(bundle=bundle, content=content("Version two uses `process_refund`."), message="v2", actor=ops.actor)
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first release")
    return ops


def test_the_agent_loop_runs_as_written(registry_server, walkthrough_state, monkeypatch):  # noqa: F811
    agent = make_api(Role.AGENT, name="readme-agent")
    monkeypatch.setenv("AGENT_KEY", agent.secret)
    code = readme_block("agent-loop").replace("http://127.0.0.1:8000", registry_server.url)
    assert len(code.strip().splitlines()) <= 14  # "a dozen lines"
    calls = []

    def call_model(*, system, tools, messages, reminder):
        calls.append((system, [t["name"] for t in tools], len(messages), reminder))
        return {"role": "assistant", "content": f"turn {len(calls)}"}

    namespace = {"call_model": call_model, "done": lambda messages: len(calls) == 2}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the README's own code)
    assert len(calls) == 2
    system, tools, _, reminder = calls[0]
    assert "process_refund" in system and tools == ["process_refund"] and reminder
    (session,) = Session.objects.filter(api_key_id=agent.actor.api_key_id)
    assert session.status == "ended" and session.version.number == 1


def test_the_push_pull_round_trip_runs_as_written(registry_server, walkthrough_state):  # noqa: F811
    script = readme_block("push-pull").replace("http://127.0.0.1:8000", registry_server.url)
    env = {
        **os.environ,
        "OPS_KEY": walkthrough_state.secret,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT / "client"),  # this checkout's client
    }
    done = subprocess.run(["bash", "-euc", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pulled refunds version 1" in done.stdout
    assert "unchanged, version 1" in done.stdout
    assert "published refunds version 3" in done.stdout and "staging: (new) -> version 3" in done.stdout
    assert "refunds v1 -> v3:" in done.stdout and "system_prompt" in done.stdout
    assert Label.objects.get(bundle__name="refunds", name="staging").version.number == 3


def _mcp_names(url: str, headers: dict[str, str]) -> tuple[set[str], list[str]]:
    async def scenario():
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            catalog = (await client.call_tool("list_capabilities", {})).structured_content
            return tools, [c["name"] for c in catalog["capabilities"]]

    return asyncio.run(scenario())


def test_the_mcp_setups_work_as_written(registry_server, walkthrough_state):  # noqa: F811
    agent = make_api(Role.AGENT, name="readme-mcp")
    tokens = shlex.split(readme_block("mcp-claude"))
    assert tokens[:5] == ["claude", "mcp", "add", "--transport", "http"]
    url = tokens[6].replace("http://127.0.0.1:8000", registry_server.url)
    name, value = tokens[tokens.index("--header") + 1].split(": ", 1)
    headers = {name: value.replace("$AGENT_KEY", agent.secret)}
    assert _mcp_names(url, headers) == ({"list_capabilities", "get_capability_protocol", "end_session"}, ["refunds"])

    config = json.loads(readme_block("mcp-json"))["mcpServers"]["prompt-registry"]
    assert config["type"] == "http"
    url = config["url"].replace("http://127.0.0.1:8000", registry_server.url)
    headers = {k: v.replace("pr_your_agent_key", agent.secret) for k, v in config["headers"].items()}
    assert _mcp_names(url, headers)[1] == ["refunds"]
