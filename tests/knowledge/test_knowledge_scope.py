"""Knowledge packs and key scopes (issue 18): a key reaches only the packs its scopes name.

Publishing refuses a version that lists a pack outside the publisher's scopes; and when a
version lists one anyway (published by an unscoped key), a scoped caller's file tools, render
(DUTY.md, domains), fast lane render and MCP protocol answer as if that pack did not exist."""

import asyncio
import json

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from mcp_server.server import close_pool_connections
from tests.conftest import Api, content, make_api

SECRET = "HR-SALARY-BANDS-7f3a"  # in every hr-internal file; no scoped answer may carry it


def scoped_api(role: str, name: str, scopes: list[str]) -> Api:
    key, secret = api_key_create(name=name, role=role, scopes=scopes, actor=SYSTEM)
    return Api(secret, key.as_actor())


class World:
    """Two packs (support-kb, hr-internal) and a bundle support-bot whose v1, published by an
    unscoped key, lists both; a publisher and an agent scoped to support-*."""

    def __init__(self) -> None:
        self.ops = make_api(Role.OPS, name="scope-ops")
        for pack in ("support-kb", "hr-internal"):
            assert self.ops.post("/api/v1/knowledge/", {"name": pack}).status_code == 201
        self.put("support-kb", "faq/DUTY.md", "# FAQ duty\n\nAnswer from knowledge/support-kb/faq/.\n")
        self.put("support-kb", "faq/refunds.md", "Refunds take 5 days.\n")
        self.put("hr-internal", "pay/DUTY.md", f"# Pay duty\n\n{SECRET}\n")
        self.put("hr-internal", "pay/bands.md", f"Bands: {SECRET}\n")
        assert self.ops.post("/api/v1/bundles/", {"name": "support-bot"}).status_code == 201
        doc = content("You answer support questions.", knowledge=["support-kb", "hr-internal"])
        assert self.publish(self.ops, doc).status_code == 201
        assert (
            self.ops.put("/api/v1/bundles/support-bot/labels/production/", {"version": 1, "reason": "go"}).status_code
            == 201
        )
        self.publisher = scoped_api(Role.PUBLISHER, "scope-publisher", ["support-*"])
        self.agent = scoped_api(Role.AGENT, "scope-agent", ["support-*"])
        self.everything = make_api(Role.AGENT, name="scope-unscoped")

    def put(self, pack: str, path: str, text: str):
        response = self.ops.put(f"/api/v1/knowledge/{pack}/files/{path}", {"content": text})
        assert response.status_code == 201, response.content

    def publish(self, api: Api, doc: dict):
        return api.post("/api/v1/bundles/support-bot/versions/", {"content": doc, "message": "m"})

    def start(self, api: Api, **body) -> str:
        response = api.post("/api/v1/sessions/", {"bundle": "support-bot", **body})
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def tool(self, api: Api, session: str, name: str, **params):
        return api.get(f"/api/v1/sessions/{session}/knowledge/{name}", data=params)


@pytest.fixture
def world(db) -> World:
    return World()


def test_publishing_refuses_a_pack_outside_the_publishers_scopes(world):
    doc = content("Also HR.", knowledge=["support-kb", "hr-internal"])
    refused = world.publish(world.publisher, doc)
    assert refused.status_code == 403, refused.content
    error = refused.json()["error"]
    assert error["code"] == "permission_denied"
    assert set(error["details"]) == {"content.knowledge[1]"}
    # A pack that does not exist gets the same answer: the refusal says nothing about existence.
    ghost = world.publish(world.publisher, content("Also HR.", knowledge=["support-kb", "hr-ghost"]))
    assert ghost.status_code == 403 and set(ghost.json()["error"]["details"]) == {"content.knowledge[1]"}
    # Not even the idempotent answer: the same content as v1 is refused to this key.
    same = world.publish(
        world.publisher, content("You answer support questions.", knowledge=["support-kb", "hr-internal"])
    )
    assert same.status_code == 403
    assert world.publish(world.publisher, content("Only support.", knowledge=["support-kb"])).status_code == 201
    # An unscoped publisher (and the admin, whose people are unscoped) still may.
    assert world.publish(world.ops, doc).status_code == 201


def test_the_file_tools_reach_only_the_listed_packs_in_the_keys_scope(world):
    for api in (world.agent, world.publisher):  # the publisher by version number, as in the report
        session = world.start(api, version=1)
        ls = world.tool(api, session, "ls", path="knowledge/").json()["output"]
        assert ls == "knowledge/support-kb/"
        missing = world.tool(api, session, "ls", path="knowledge/hr-internal/")
        assert missing.status_code == 404, missing.content
        for name, params in [
            ("read", {"path": "knowledge/hr-internal/pay/bands.md"}),
            ("read", {"path": "knowledge/hr-internal/pay/DUTY.md"}),
            ("grep", {"pattern": "HR", "path": "knowledge/hr-internal/"}),
            ("ls", {"path": "knowledge/hr-internal/pay/"}),
        ]:
            answer = world.tool(api, session, name, **params)
            assert answer.status_code == 404, (name, params, answer.content)
            assert SECRET not in answer.content.decode()
        for name, params in [
            ("grep", {"pattern": "HR-SALARY"}),
            ("grep", {"pattern": "."}),
            ("glob", {"pattern": "knowledge/**"}),
            ("glob", {"pattern": "**/*.md"}),
            ("glob", {"pattern": "knowledge/hr-internal/**"}),
        ]:
            answer = world.tool(api, session, name, **params)
            assert answer.status_code == 200, answer.content
            assert SECRET not in answer.json()["output"] and "hr-internal" not in answer.json()["output"]
        read = world.tool(api, session, "read", path="knowledge/support-kb/faq/refunds.md")
        assert "Refunds take 5 days." in read.json()["output"]
    # An unscoped key on the same version reads both packs.
    session = world.start(world.everything)
    assert (
        SECRET
        in world.tool(world.everything, session, "read", path="knowledge/hr-internal/pay/bands.md").json()["output"]
    )


def test_a_listed_pack_outside_the_scope_answers_as_one_that_does_not_exist(world):
    world.ops.post("/api/v1/bundles/", {"name": "support-two"})
    doc = content("Two.", knowledge=["support-kb", "hr-internal", "support-ghost"])
    assert world.ops.post("/api/v1/bundles/support-two/versions/", {"content": doc, "message": "m"}).status_code == 201
    session = world.agent.post("/api/v1/sessions/", {"bundle": "support-two", "version": 1}).json()["id"]
    hidden = world.tool(world.agent, session, "ls", path="knowledge/hr-internal/")
    ghost = world.tool(world.agent, session, "ls", path="knowledge/support-ghost/")
    assert hidden.status_code == ghost.status_code == 404
    assert hidden.json()["error"]["message"].replace("hr-internal", "X") == ghost.json()["error"]["message"].replace(
        "support-ghost", "X"
    )


def test_the_render_shows_only_the_duty_and_domains_of_packs_in_the_keys_scope(world):
    session = world.start(world.agent)
    rendered = world.agent.post(f"/api/v1/sessions/{session}/render/").json()
    system = rendered["prefix"]["system"]
    assert "knowledge/support-kb/faq/" in system and "# FAQ duty" in system
    assert SECRET not in json.dumps(rendered) and "hr-internal" not in system
    # The unscoped key's render of the same version shows both (and is a different prefix).
    other = world.start(world.everything)
    full = world.everything.post(f"/api/v1/sessions/{other}/render/").json()
    assert SECRET in full["prefix"]["system"] and full["prefix_sha256"] != rendered["prefix_sha256"]
    # The scoped render again, after the unscoped one warmed the cache: still without HR.
    again = world.agent.post(f"/api/v1/sessions/{session}/render/").json()
    assert again["prefix_sha256"] == rendered["prefix_sha256"]


@pytest.fixture
def live_world(transactional_db):
    """A World for code that runs on other threads (the fast lane's pool, MCP's pool)."""
    from edge.django_lane import shutdown_pool

    yield World()
    shutdown_pool()
    close_pool_connections()


def test_the_fast_lane_render_follows_the_keys_scope(live_world):
    from api import fastlane
    from tests.edge.test_fastlane import _run

    session = live_world.start(live_world.agent)
    status, _, body = _run(
        fastlane.application,
        "POST",
        f"/api/v1/sessions/{session}/render/",
        {"Authorization": f"Bearer {live_world.agent.secret}", "Content-Type": "application/json"},
    )
    assert status == 200 and b"# FAQ duty" in body and SECRET.encode() not in body


def test_the_mcp_protocol_follows_the_keys_scope(live_world):
    from tests.mcp_server.test_mcp import call, in_memory

    session = live_world.start(live_world.agent)

    async def protocols():
        async with in_memory(live_world.agent.actor) as client:
            new = await call(client, "get_capability_protocol", capability="support-bot")
            pinned = await call(client, "get_capability_protocol", capability="support-bot", session_id=session)
            return new, pinned

    for protocol in asyncio.run(protocols()):
        assert "# FAQ duty" in protocol["system_prompt"], protocol
        assert SECRET not in json.dumps(protocol) and "hr-internal/" not in protocol["system_prompt"]
