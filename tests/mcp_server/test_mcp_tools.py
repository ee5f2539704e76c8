"""Tools from MCP servers: pinned at publish from a real local MCP server (the `mcp` package),
their source recorded; the drift check when the server's schema changes or a tool goes; the
same URL rules as webhooks."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from access.models import Role
from registry import mcp_drift
from registry.models import McpDrift, VersionTool
from registry.services import label_move
from sessions_app.services import session_end, session_start
from tests.conftest import make_api
from tests.live import free_port
from webhooks.models import Delivery
from webhooks.services import endpoint_create

SERVER = Path(__file__).resolve().parent.parent / "mcp_tool_server.py"


class McpServer:
    """tests/mcp_tool_server.py on 127.0.0.1, restartable with another variant on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen | None = None

    def start(self, variant: int) -> None:
        self.stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.port), str(variant)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the MCP server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def mcp():
    server = McpServer()
    server.start(1)
    yield server
    server.stop()


def declaring(url: str, tools: list[str] | None = None, prompt: str = "Orders agent.") -> dict:
    return {
        "system_prompt": prompt,
        "tools": [],
        "mcp_servers": [{"name": "orders", "url": url, "tools": tools or ["lookup_order", "cancel_order"]}],
    }


def publish(publisher, doc: dict):
    return publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "m"})


def test_it_pins_the_servers_schemas_into_the_version_as_ordinary_tools(mcp, bundle, publisher, agent, ops):
    response = publish(publisher, declaring(mcp.url))
    assert response.status_code == 201, response.json()
    tools = {t["name"]: t for t in response.json()["content"]["tools"]}
    assert tools["lookup_order"]["input_schema"]["required"] == ["order_id"]
    assert tools["lookup_order"]["description"] == "Look an order up."
    assert "output_schema" in tools["lookup_order"]  # the server gives one: part of the signature
    sources = dict(VersionTool.objects.values_list("signature__name", "source"))
    assert sources == {"lookup_order": "orders", "cancel_order": "orders"}
    # The session sees exactly the pinned schema, whatever the server says later.
    label_move(bundle=bundle, name="production", version=bundle.versions.get(), actor=ops.actor, reason="r")
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    mcp.start(2)
    pinned = agent.get(f"/api/v1/sessions/{session['id']}/bundle/").json()["content"]["tools"]
    assert {t["name"]: t for t in pinned}["lookup_order"]["input_schema"]["required"] == ["order_id"]


def test_a_tool_the_publisher_pinned_is_kept_without_asking_the_server(bundle, publisher):
    doc = declaring(f"http://127.0.0.1:{free_port()}/mcp", ["lookup_order"])  # nothing listens there
    doc["tools"] = [{"name": "lookup_order", "description": "Look.", "input_schema": {"type": "object"}}]
    response = publish(publisher, doc)
    assert response.status_code == 201, response.json()
    assert VersionTool.objects.get().source == "orders"


def test_a_tool_the_server_does_not_offer_is_a_400(mcp, bundle, publisher):
    response = publish(publisher, declaring(mcp.url, ["lookup_order", "refund_order"]))
    assert response.status_code == 400
    assert "refund_order" in str(response.json()["error"]["details"])


def test_an_unreachable_server_is_a_400_that_says_to_pin_from_elsewhere(bundle, publisher):
    response = publish(publisher, declaring(f"http://127.0.0.1:{free_port()}/mcp"))
    assert response.status_code == 400
    [message] = response.json()["error"]["details"]["content.mcp_servers[0].url"]
    assert "Pin its tools in `tools`" in message


def test_a_private_address_is_refused_as_for_webhooks(bundle, publisher, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    response = publish(publisher, declaring("http://127.0.0.1:9/mcp"))
    assert response.status_code == 400
    assert "WEBHOOK_ALLOW_PRIVATE_URLS" in str(response.json()["error"]["details"])


@pytest.mark.parametrize(
    "servers",
    [
        "orders",
        [{"name": "orders", "url": "ftp://x/mcp", "tools": ["a"]}],
        [{"name": "Orders!", "url": "http://x/mcp", "tools": ["a"]}],
        [{"name": "orders", "url": "http://x/mcp", "tools": []}],
        [{"name": "orders", "url": "http://x/mcp", "tools": ["a"], "token": "secret"}],
        [{"name": "o", "url": "http://x/mcp", "tools": ["a"]}] * 11,
    ],
)
def test_a_bad_mcp_servers_declaration_is_a_400(bundle, publisher, servers):
    response = publish(publisher, {"system_prompt": "x", "tools": [], "mcp_servers": servers})
    assert response.status_code == 400
    assert any(k.startswith("content.mcp_servers") for k in response.json()["error"]["details"])


def drift_events() -> list[dict]:
    return [d.payload["data"] for d in Delivery.objects.filter(event="tool.drift").order_by("id")]


def test_a_changed_schema_under_live_sessions_is_one_drift_naming_them(
    mcp, bundle, publisher, agent, ops, django_capture_on_commit_callbacks
):
    admin = make_api(Role.ADMIN)
    endpoint_create(url="http://127.0.0.1:9/hook", events=["tool.drift"], tools=["lookup_order"], actor=admin.actor)
    assert publish(publisher, declaring(mcp.url)).status_code == 201
    version = bundle.versions.get()
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="r")
    a, _ = session_start(bundle=bundle, actor=agent.actor)
    b, _ = session_start(bundle=bundle, actor=agent.actor)
    ended, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end(session=ended, actor=agent.actor)

    report = mcp_drift.mcp_drift_check()
    assert (report.checked, report.new, report.drifts) == (2, 0, [])  # the server matches the pins

    mcp.start(2)  # lookup_order gains a required `region`
    report = mcp_drift.mcp_drift_check()
    assert report.new == 1
    [event] = drift_events()
    assert (event["bundle"], event["version"], event["server"], event["tool"], event["kind"]) == (
        "refunds",
        1,
        "orders",
        "lookup_order",
        "changed",
    )
    assert sorted(event["sessions"]) == sorted([str(a.pk), str(b.pk)]) and event["sessions_active"] == 2
    assert mcp_drift.mcp_drift_check().new == 0  # announced once
    assert len(drift_events()) == 1

    mcp.start(3)  # cancel_order removed (the hook filters it out: it names lookup_order only)
    report = mcp_drift.mcp_drift_check()
    assert {(d["tool"], d["kind"]) for d in report.drifts} == {("cancel_order", "removed")}
    assert report.resolved == 1  # lookup_order is as pinned again
    assert len(drift_events()) == 1
    assert set(McpDrift.objects.filter(resolved_at__isnull=True).values_list("tool", "kind")) == {
        ("cancel_order", "removed")
    }


def test_an_unreachable_server_is_reported_not_announced(mcp, bundle, publisher, ops):
    assert publish(publisher, declaring(mcp.url)).status_code == 201
    label_move(bundle=bundle, name="production", version=bundle.versions.get(), actor=ops.actor, reason="r")
    mcp.stop()
    report = mcp_drift.mcp_drift_check()
    assert list(report.unreachable) == [mcp.url] and report.drifts == []
    assert not McpDrift.objects.exists()


def test_the_version_page_shows_the_drift_alert(mcp, bundle, publisher, agent, ops):
    from django.urls import reverse

    from tests.adminui.test_adminui_views import client_for, make_user

    assert publish(publisher, declaring(mcp.url)).status_code == 201
    label_move(bundle=bundle, name="production", version=bundle.versions.get(), actor=ops.actor, reason="r")
    session_start(bundle=bundle, actor=agent.actor)
    page_url = reverse("admin:adminui_version", args=["refunds", 1])
    reader = client_for(make_user("rita", is_superuser=True))
    assert 'id="mcp-drift"' not in reader.get(page_url).content.decode()
    mcp.start(2)
    mcp_drift.mcp_drift_check()
    page = reader.get(page_url).content.decode()
    assert 'id="mcp-drift"' in page
    assert "<code>lookup_order</code> from orders (schema changed" in page
    assert "1 active session at risk" in page


def test_the_check_over_the_api_is_for_ops_and_shows_a_scoped_key_its_bundles_only(mcp, bundle, publisher, ops):
    from access.actors import SYSTEM
    from access.services import api_key_create
    from tests.conftest import Api

    assert publish(publisher, declaring(mcp.url)).status_code == 201
    label_move(bundle=bundle, name="production", version=bundle.versions.get(), actor=ops.actor, reason="r")
    mcp.start(3)
    key, secret = api_key_create(name="billing-ops", role=Role.OPS, actor=SYSTEM, scopes=["billing"])
    scoped = Api(secret, key.as_actor())
    assert publisher.post("/api/v1/mcp-servers/check/").status_code == 403
    body = scoped.post("/api/v1/mcp-servers/check/").json()
    assert (body["drifts"], body["unreachable"]) == ([], {})  # refunds is not its bundle
    body = ops.post("/api/v1/mcp-servers/check/").json()
    assert [(d["bundle"], d["tool"], d["kind"], d["announced"]) for d in body["drifts"]] == [
        ("refunds", "cancel_order", "removed", False)  # the scoped call recorded and announced it
    ]
    assert McpDrift.objects.count() == 1
