"""What the protocol promises a host over MCP (issue 37, item 8), with the official `mcp`
client: the knowledge file tools (ls, glob, grep, read) run over /mcp, scoped to the session
and the key; each turn's text and routed skill cards reach the host through `take_turn`; a
refusal starts with the contract's code; a missing or bad key is a 401 whose reason the `mcp`
client shows (not "Server returned an error response"), code first."""

import asyncio

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from access.models import Role
from registry.services import bundle_create, label_move, version_publish
from skills.models import SkillTurn
from tests.conftest import content, make_api
from tests.knowledge.test_knowledge_scope import SECRET, live_world  # noqa: F401 (fixture)
from tests.mcp_server.test_mcp import _http_client, _key, call, debug_server, in_memory  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


async def text(client: Client, tool: str, **arguments) -> tuple[bool, str]:
    """(is_error, the text the model reads) of one tool call."""
    result = await client.call_tool(tool, arguments)
    return result.is_error, result.content[0].text if result.content else ""


def test_the_file_tools_run_over_mcp_on_the_sessions_packs_within_the_keys_scope(live_world):  # noqa: F811
    agent = live_world.agent.actor  # scoped to support-*: the version also lists hr-internal

    async def scenario():
        async with in_memory(agent) as client:
            pinned = await call(client, "get_capability_protocol", capability="support-bot")
            sid = pinned["session_id"]
            answers = {
                "ls": await text(client, "ls", session_id=sid, path="knowledge/"),
                "glob": await text(client, "glob", session_id=sid, pattern="knowledge/**/*.md"),
                "grep": await text(client, "grep", session_id=sid, pattern="5 days"),
                "read": await text(client, "read", session_id=sid, path="knowledge/support-kb/faq/refunds.md"),
                "hidden": await text(client, "read", session_id=sid, path="knowledge/hr-internal/pay/bands.md"),
                "everything": await text(client, "grep", session_id=sid, pattern="."),
                "escape": await text(client, "read", session_id=sid, path="knowledge/../../etc/passwd"),
                "no session": await text(client, "ls", session_id="not-a-uuid", path="knowledge/"),
                "no path": await text(client, "read", session_id=sid),
            }
            return pinned, answers

    pinned, answers = asyncio.run(scenario())
    assert [t["name"] for t in pinned["tools"]][-4:] == ["ls", "glob", "grep", "read"]  # what the protocol names
    assert answers["ls"] == (False, "knowledge/support-kb/")
    assert answers["glob"][1].splitlines() == [
        "knowledge/support-kb/faq/DUTY.md",
        "knowledge/support-kb/faq/refunds.md",
    ]
    assert answers["grep"] == (False, "knowledge/support-kb/faq/refunds.md:1:Refunds take 5 days.")
    assert not answers["read"][0] and "Refunds take 5 days." in answers["read"][1]
    # The pack outside the key's scope does not exist for it, as over REST.
    assert answers["hidden"][0] and answers["hidden"][1].startswith("not_found: ")
    assert SECRET not in repr(answers) and "hr-internal/" not in answers["everything"][1]
    assert answers["escape"][0] and answers["escape"][1].startswith("validation_error: ")
    assert answers["no session"][0] and answers["no session"][1].startswith("validation_error: ")
    assert answers["no path"] == (True, "validation_error: the arguments do not match read's input schema: path.")


def test_another_keys_session_has_no_files_for_it(live_world):  # noqa: F811
    async def scenario():
        async with in_memory(live_world.everything.actor) as client:
            pinned = await call(client, "get_capability_protocol", capability="support-bot")
        async with in_memory(live_world.agent.actor) as client:
            return await text(client, "ls", session_id=pinned["session_id"], path="knowledge/")

    failed, answer = asyncio.run(scenario())
    assert failed and answer.startswith("not_found: ")


@pytest.fixture
def skilled(transactional_db):
    ops = make_api(Role.OPS, name="turn-ops")
    bundle = bundle_create(name="refunds", description="Refunds", actor=ops.actor)
    doc = content("Help customers, politely.")
    doc["skills"] = [
        {
            "name": "refund_order",
            "summary": "Use when the customer wants money back",
            "description": "Refunds an order. Inputs: order id; not for exchanges.",
            "keywords": ["refund", "money back", "reimburse"],
            "category": "billing",
            "examples": ["I want a refund", "give me my money back"],
            "level": "L2",
        }
    ]
    version = version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="first")
    return bundle


def test_take_turn_gives_the_host_this_turns_text_and_skill_cards(skilled):
    actor, _ = _key(name="turn-agent")

    async def scenario():
        async with in_memory(actor) as client:
            pinned = await call(client, "get_capability_protocol", capability="refunds")
            sid = pinned["session_id"]
            first = await call(client, "take_turn", session_id=sid, text="I want my money back for order 7")
            second = await call(client, "take_turn", session_id=sid, text="thanks", invoked=["refund_order"])
            empty = await call(client, "take_turn", session_id=sid, text="  ")
            return pinned, first, second, empty

    pinned, first, second, empty = asyncio.run(scenario())
    assert "take_turn" in pinned["per_turn"]
    assert first["turn"] == 1 and first["skills"]["routed"] == ["refund_order"]
    # The per-turn text: the render's tail (date and time), then the routed skill's card.
    assert first["text"].startswith(pinned["reminder"].split("\n")[0][:10]) or pinned["reminder"][:10] in first["text"]
    assert "Skills for this turn:" in first["text"] and "Refunds an order." in first["text"]
    assert second["turn"] == 2 and second["reported"] == {"turn": 1, "invoked": ["refund_order"]}
    assert SkillTurn.objects.get(session_id=pinned["session_id"], number=1).invoked == ["refund_order"]
    assert empty["error"].startswith("validation_error: ")


def test_a_host_without_a_working_key_is_told_why_code_first(debug_server):  # noqa: F811
    """The official client raises the 401's reason (the header to set, and that there is no
    OAuth), not "Server returned an error response"."""

    async def attempt(headers):
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        try:
            async with Client(streamable_http_client(f"{debug_server.url}/mcp", http_client=http)) as client:
                await client.list_tools()
        except BaseExceptionGroup as group:  # raised from the client's task group
            found = group.subgroup(MCPError)
            if found is None:
                raise
            while isinstance(found, BaseExceptionGroup):  # nested task groups: the first leaf
                found = found.exceptions[0]
            return str(found)
        except MCPError as error:
            return str(error)
        return None

    for headers in ({}, {"Authorization": "Bearer pr_" + "x" * 43}):
        reason = asyncio.run(attempt(headers))
        assert reason is not None and reason.startswith("not_authenticated: "), reason
        assert "Authorization" in reason or "not valid" in reason
        assert "no OAuth" in reason


def test_the_file_tools_over_http(debug_server, live_world):  # noqa: F811
    async def scenario():
        async with _http_client(debug_server.url, live_world.agent.secret) as client:
            pinned = await call(client, "get_capability_protocol", capability="support-bot")
            return await text(
                client, "read", session_id=pinned["session_id"], path="knowledge/support-kb/faq/refunds.md"
            )

    failed, answer = asyncio.run(scenario())
    assert not failed and "Refunds take 5 days." in answer
