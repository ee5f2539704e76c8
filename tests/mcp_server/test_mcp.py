"""The MCP server (mcp_server/), with the `mcp` package's own client: in memory (the SDK's
in-process connection) and over streamable HTTP against the running service at /mcp.
The tools run the REST API's services on worker threads, hence transactional_db."""

import asyncio
import json
import logging
import os
import re
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from access.actors import SYSTEM
from access.models import ApiKey, Role
from access.services import api_key_create, api_key_revoke
from audit.models import AuditEvent
from mcp_server.server import build_server, close_pool_connections, current_actor
from registry.models import BundleVersion
from registry.services import bundle_create, label_move, version_publish, version_revoke
from sessions_app import rules
from sessions_app.models import Session
from tests.conftest import content, make_api
from tests.live import WebServer

pytestmark = pytest.mark.django_db(transaction=True)
MARKER = "OKAPI-PROTOCOL-MARKER-91c3"
TOOLS = {"list_capabilities", "get_capability_protocol", "end_session", "take_turn", "ls", "glob", "grep", "read"}


def _key(role: str = Role.AGENT, *, name: str = "mcp-agent", scopes=None):
    key, secret = api_key_create(name=name, role=role, scopes=scopes, actor=SYSTEM)
    return key.as_actor(), secret


@pytest.fixture(autouse=True, scope="module")
def pool_connections_closed():
    """The tools' pool threads keep their connections; close them so the test database can go."""
    yield
    close_pool_connections()


@pytest.fixture
def bundles(db):
    """refunds (v1 with production, a marker in its prompt and tools, then v2) and support-faq."""
    ops = make_api(Role.OPS, name="mcp-ops")
    refunds = bundle_create(
        name="refunds", description="Refund agent", when_to_use="A customer wants money back.", actor=ops.actor
    )
    doc = content(f"Refund orders with `process_refund`. {MARKER}")
    doc["tools"][0]["description"] = f"Refund an order. {MARKER}"
    doc["guardrails"] = {"default": "allow", "rules": []}
    doc["output_schema"] = {"type": "object", "properties": {"refunded": {"type": "boolean"}}}
    v1 = version_publish(bundle=refunds, content=doc, message="v1", actor=ops.actor).version
    v2 = version_publish(
        bundle=refunds, content={**doc, "system_prompt": doc["system_prompt"] + " v2"}, message="v2", actor=ops.actor
    ).version
    label_move(bundle=refunds, name="production", version=v1, actor=ops.actor, reason="first")
    faq = bundle_create(
        name="support-faq", description="FAQ", when_to_use="A question about the product.", actor=ops.actor
    )
    f1 = version_publish(bundle=faq, content=content("Answer from the FAQ."), message="v1", actor=ops.actor).version
    label_move(bundle=faq, name="production", version=f1, actor=ops.actor, reason="first")
    return {"ops": ops, "refunds": refunds, "v1": v1, "v2": v2}


@asynccontextmanager
async def in_memory(actor):
    token = current_actor.set(actor)
    try:
        async with Client(build_server()) as client:
            yield client
    finally:
        current_actor.reset(token)


async def call(client: Client, tool: str, **arguments):
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""
    if result.is_error:
        return {"error": text}
    return result.structured_content if result.structured_content is not None else json.loads(text)


def test_it_offers_its_tools_and_immutable_bundle_resources(bundles):
    actor, _ = _key()

    async def scenario():
        async with in_memory(actor) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            templates = (await client.list_resource_templates()).resource_templates
            return tools, templates, client.instructions

    tools, templates, instructions = asyncio.run(scenario())
    assert set(tools) == TOOLS
    schema = tools["get_capability_protocol"].input_schema
    assert schema["required"] == ["capability"] and {"label", "session_id"} <= set(schema["properties"])
    assert [t.uri_template for t in templates] == ["bundle://{name}@sha256:{content_hash}"]
    assert rules.rules(instructions) == rules.rules() and f"version {rules.version()}" in instructions


def test_the_catalog_follows_the_keys_scopes(bundles):
    everything, _ = _key(name="all")
    support_only, _ = _key(name="support", scopes=["support-*"])

    async def names(actor):
        async with in_memory(actor) as client:
            found = await call(client, "list_capabilities")
            return {c["name"]: c for c in found["capabilities"]}

    seen = asyncio.run(names(everything))
    assert set(seen) == {"refunds", "support-faq"}
    assert seen["refunds"]["when_to_use"] == "A customer wants money back." and seen["refunds"]["labels"] == {
        "production": 1
    }
    assert set(asyncio.run(names(support_only))) == {"support-faq"}


def test_the_mcp_catalog_entries_equal_the_rest_catalogs(bundles):
    """One entry shape for both (registry.selectors.catalog_entry): what GET /api/v1/catalog/ lists."""
    api = make_api(Role.AGENT, "both")
    actor = api.actor
    rest = api.get("/api/v1/catalog/").json()["results"]

    async def listed():
        async with in_memory(actor) as client:
            return (await call(client, "list_capabilities"))["capabilities"]

    assert asyncio.run(listed()) == rest and len(rest) == 2


def test_a_protocol_pins_a_session_that_continues_by_its_id(bundles):
    actor, _ = _key()
    refunds, v1, ops = bundles["refunds"], bundles["v1"], bundles["ops"]

    async def scenario():
        async with in_memory(actor) as client:
            first = await call(client, "get_capability_protocol", capability="refunds")
            await asyncio.to_thread(_move, refunds, bundles["v2"], ops)
            again = await call(client, "get_capability_protocol", capability="refunds", session_id=first["session_id"])
            fresh = await call(client, "get_capability_protocol", capability="refunds")
            ended = await call(client, "end_session", session_id=first["session_id"])
            after = await call(client, "get_capability_protocol", capability="refunds", session_id=first["session_id"])
            elsewhere = await call(
                client, "get_capability_protocol", capability="support-faq", session_id=fresh["session_id"]
            )
            return first, again, fresh, ended, after, elsewhere

    first, again, fresh, ended, after, elsewhere = asyncio.run(scenario())
    assert (first["version"], first["content_hash"], first["label"]) == (1, v1.content_hash, "production")
    assert MARKER in first["system_prompt"] and [t["name"] for t in first["tools"]] == ["process_refund"]
    assert first["guardrails"] == {"default": "allow", "rules": []}
    assert first["output_schema"]["properties"] == {"refunded": {"type": "boolean"}}
    assert first["resource"] == f"bundle://refunds@sha256:{v1.content_hash}" and first["reminder"]
    assert f"POST /api/v1/sessions/{first['session_id']}/turn/" in first["per_turn"]
    session = Session.objects.get(pk=first["session_id"])
    assert session.version_id == v1.pk and session.api_key_id == actor.api_key_id
    # The label moved, the session did not: byte-identical protocol; a new session gets v2.
    assert again["version"] == 1 and again["system_prompt"] == first["system_prompt"] and not again["started"]
    assert fresh["version"] == 2 and fresh["session_id"] != first["session_id"]
    assert ended["status"] == "ended"
    # Refusals start with the contract's code, as this file's docs promise (not the SDK's
    # "Error executing tool <name>: ...").
    assert after["error"].startswith("session_ended: ")
    assert elsewhere["error"].startswith("not_found: ")


def _move(bundle, version, ops):
    from django.db import connection

    try:
        label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="ship v2")
    finally:
        connection.close()


def test_a_session_is_the_keys_own(bundles):
    owner, _ = _key(name="owner")
    other, _ = _key(name="other")

    async def scenario():
        async with in_memory(owner) as client:
            pinned = await call(client, "get_capability_protocol", capability="refunds", label="production")
        async with in_memory(other) as client:
            stolen = await call(
                client, "get_capability_protocol", capability="refunds", session_id=pinned["session_id"]
            )
            stop = await call(client, "end_session", session_id=pinned["session_id"])
            bad = await call(client, "end_session", session_id="not-a-uuid")
        return pinned, stolen, stop, bad

    pinned, stolen, stop, bad = asyncio.run(scenario())
    assert stolen["error"].startswith("not_found: ") and stop["error"].startswith("not_found: ")
    assert bad["error"].startswith("validation_error: ")
    assert Session.objects.get(pk=pinned["session_id"]).status == "active"  # the other key changed nothing


def test_a_revoked_version_answers_version_revoked_with_the_labels(bundles):
    actor, _ = _key()
    ops = bundles["ops"]

    async def pin():
        async with in_memory(actor) as client:
            return await call(client, "get_capability_protocol", capability="refunds")

    pinned = asyncio.run(pin())
    label_move(
        bundle=bundles["refunds"],
        name="production",
        version=bundles["v2"],
        actor=ops.actor,
        reason="ship v2",
        allow_breaking=True,
    )
    version_revoke(version=bundles["v1"], actor=ops.actor, reason="leaks data")

    async def again():
        async with in_memory(actor) as client:
            return await call(client, "get_capability_protocol", capability="refunds", session_id=pinned["session_id"])

    answer = asyncio.run(again())["error"]
    assert answer.startswith("version_revoked: ") and '"labels": {"production": 2}' in answer


def test_bundle_resources_are_the_versions_canonical_bytes_within_the_keys_scope(bundles):
    v1: BundleVersion = bundles["v1"]
    everything, _ = _key(name="all")
    support_only, _ = _key(name="support", scopes=["support-*"])
    uri = f"bundle://refunds@sha256:{v1.content_hash}"

    async def read(actor, target):
        async with in_memory(actor) as client:
            try:
                result = await client.read_resource(target)
            except Exception as exc:  # the SDK raises the server's error for a failed read
                return exc
            return result.contents[0].text

    assert asyncio.run(read(everything, uri)).encode() == bytes(v1.canonical)
    assert "not_found" in str(asyncio.run(read(support_only, uri)))
    assert "not_found" in str(asyncio.run(read(everything, f"bundle://refunds@sha256:{'0' * 64}")))


def test_the_protocol_text_never_reaches_a_log_or_the_audit_trail(bundles, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    actor, _ = _key(name="leak-check")

    async def scenario():
        async with in_memory(actor) as client:
            pinned = await call(client, "get_capability_protocol", capability="refunds")
            await call(client, "get_capability_protocol", capability="refunds", session_id=pinned["session_id"])
            await call(client, "end_session", session_id=pinned["session_id"])
            await call(client, "get_capability_protocol", capability="refunds", session_id=pinned["session_id"])  # 410
            return pinned

    pinned = asyncio.run(scenario())
    assert MARKER in pinned["system_prompt"]  # it was served
    captured = capfd.readouterr()
    logged = "\n".join([r.getMessage() for r in caplog.records] + [captured.out, captured.err])
    assert MARKER not in logged
    fetched = AuditEvent.objects.filter(action="protocol.fetched").order_by("id")
    assert [(e.actor, e.target, e.data["version"], e.data["content_hash"]) for e in fetched] == [
        ("key:leak-check", pinned["session_id"], 1, pinned["content_hash"])
    ] * 2
    assert [e.data["session_started"] for e in fetched] == [True, False]
    assert MARKER not in "\n".join(str(row) for row in AuditEvent.objects.values())


def test_skill_md_and_the_instructions_carry_the_same_rules_and_version(agent):
    response = agent.get("/api/v1/shell/SKILL.md")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/markdown")
    served = response.content.decode()
    checked_in = (Path(__file__).resolve().parents[2] / "sessions_app" / "SKILL.md").read_text()
    assert served == checked_in
    assert response["X-Skill-Version"] == re.search(r"^version: (\S+)$", checked_in, re.M).group(1)
    instructions = build_server().instructions
    assert rules.rules(instructions) == rules.rules(served) and len(rules.rules(served)) >= 7
    assert f"version {response['X-Skill-Version']}" in instructions
    for must in ("when_to_use", "not from memory", "memory, local files or logs", "temporarily unavailable"):
        assert must in served, must


# --- over HTTP, against the running service ------------------------------------------------


@pytest.fixture(scope="module")
def debug_server(django_db_setup, django_db_blocker):
    """The service at DEBUG log level, so that anything logged at all would show in its output."""
    server = WebServer(env={"LOG_LEVEL": "DEBUG"})
    server.start()
    yield server
    server.stop()


def _http_client(url: str, secret: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


def test_mcp_over_http_refuses_requests_without_a_working_key(debug_server):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = httpx.post(f"{debug_server.url}/mcp", json=ping)
    # A JSON-RPC request gets a JSON-RPC error (what an MCP client reads), the contract's code
    # first, the contract's error object as its data; anything else the contract's shape.
    error = answer.json()["error"]
    assert answer.status_code == 401 and answer.json()["id"] == 1 and error["data"]["code"] == "not_authenticated"
    assert error["message"].startswith("not_authenticated: ") and "no OAuth" in error["message"]
    assert answer.headers["www-authenticate"].startswith("Bearer")
    answer = httpx.post(f"{debug_server.url}/mcp", content=b"not json")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "not_authenticated"
    answer = httpx.post(f"{debug_server.url}/mcp", json=ping, headers={"Authorization": "Bearer pr_" + "x" * 43})
    assert answer.status_code == 401
    answer = httpx.post(f"{debug_server.url}/mcp", json=ping, headers={"Host": "evil.example"})
    assert answer.status_code == 400
    answer = httpx.post(f"{debug_server.url}/mcp/else", json=ping)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_mcp_over_http_refuses_a_ci_key(debug_server):
    # A ci key may report checks and nothing else: no catalog, no sessions through MCP.
    _, secret = _key(Role.CI, name="mcp-ci")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = httpx.post(f"{debug_server.url}/mcp", json=ping, headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 403 and answer.json()["error"]["data"]["code"] == "permission_denied"
    assert answer.json()["error"]["message"].startswith("permission_denied: ")


def test_mcp_over_http_initialises_lists_and_calls_every_tool(debug_server, bundles):
    _, everything = _key(name="http-all")
    support_key, support_only = _key(name="http-support", scopes=["support-*"])

    async def scenario(secret):
        async with _http_client(debug_server.url, secret) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            catalog = await call(client, "list_capabilities")
            names = sorted(c["name"] for c in catalog["capabilities"])
            pinned = await call(client, "get_capability_protocol", capability=names[-1])
            again = await call(client, "get_capability_protocol", capability=names[-1], session_id=pinned["session_id"])
            resource = await client.read_resource(pinned["resource"])
            ended = await call(client, "end_session", session_id=pinned["session_id"])
            return client.instructions, tools, names, pinned, again, resource.contents[0].text, ended

    instructions, tools, names, pinned, again, resource, ended = asyncio.run(scenario(everything))
    assert tools == TOOLS and rules.rules(instructions) == rules.rules()
    assert names == ["refunds", "support-faq"]
    assert again["content_hash"] == pinned["content_hash"] and again["session_id"] == pinned["session_id"]
    assert json.loads(resource)["system_prompt"] == "Answer from the FAQ."
    assert ended["status"] == "ended"
    assert Session.objects.get(pk=pinned["session_id"]).status == "ended"

    _, support_tools, support_names, *_ = asyncio.run(scenario(support_only))
    assert support_names == ["support-faq"]  # the catalog changes with the key's scopes

    api_key_revoke(key=ApiKey.objects.get(pk=support_key.api_key_id), actor=SYSTEM)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = httpx.post(f"{debug_server.url}/mcp", json=ping, headers={"Authorization": f"Bearer {support_only}"})
    assert answer.status_code == 401  # a revoked key fails on its very next request


def test_mcp_over_http_logs_no_protocol_text(debug_server, bundles):
    _, secret = _key(name="http-leak")

    async def scenario():
        async with _http_client(debug_server.url, secret) as client:
            pinned = await call(client, "get_capability_protocol", capability="refunds")
            await client.read_resource(pinned["resource"])
            await call(client, "end_session", session_id=pinned["session_id"])
            return pinned

    assert MARKER in asyncio.run(scenario())["system_prompt"]
    output = "".join(debug_server.output)
    assert "DEBUG" in output or "INFO" in output  # the server does log, at DEBUG
    assert MARKER not in output


def test_the_stdio_bridge_forwards_everything_to_the_registry(debug_server, bundles):
    """`promptreg mcp-stdio`, started by the mcp client as a host would start it."""
    _, secret = _key(name="stdio")
    env = {
        **os.environ,
        "REGISTRY_URL": debug_server.url,
        "REGISTRY_API_KEY": secret,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "client"),
    }
    params = StdioServerParameters(command=sys.executable, args=["-m", "promptreg.cli", "mcp-stdio"], env=env)

    async def scenario():
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            catalog = await call(client, "list_capabilities")
            pinned = await call(client, "get_capability_protocol", capability="refunds")
            resource = await client.read_resource(pinned["resource"])
            ended = await call(client, "end_session", session_id=pinned["session_id"])
            return client.instructions, tools, catalog, pinned, resource.contents[0].text, ended

    instructions, tools, catalog, pinned, resource, ended = asyncio.run(scenario())
    assert tools == TOOLS and rules.rules(instructions) == rules.rules()
    assert {c["name"] for c in catalog["capabilities"]} == {"refunds", "support-faq"}
    assert pinned["version"] == 1 and MARKER in pinned["system_prompt"]
    assert resource.encode() == bytes(bundles["v1"].canonical)
    assert ended["status"] == "ended"
