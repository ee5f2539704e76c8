"""tool.drained from the real Celery worker: the worker that drains a version settles its tools
right after, so a signature shared by two versions that drain at different times is announced
once, within 2 s of the last session's end."""

import time

import pytest

from registry.models import McpDrift, VersionTool
from sessions_app.services import session_end, session_start
from tests.registry.test_tool_drain import hook, move, shared, tool_events  # noqa: F401 (fixtures)
from tests.sessions_app.test_worker import _wait_for, worker  # noqa: F401 (fixture)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_shared_signature_drains_once_within_2_s_of_its_last_session(worker, bundle, shared, ops, agent, hook):  # noqa: F811
    v1, v2, v3 = shared
    move(bundle, ops, "production", v1)
    move(bundle, ops, "canary", v2)
    a, _ = session_start(bundle=bundle, actor=agent.actor)
    b, _ = session_start(bundle=bundle, label="canary", actor=agent.actor)
    move(bundle, ops, "production", v3)
    move(bundle, ops, "canary", v3)
    assert tool_events() == ["tool.draining"]

    session_end(session=a, actor=agent.actor)  # the worker drains v1; v2 still carries the tool
    _wait_for(lambda: any('"version.drained"' in line for line in worker), 2.0)
    time.sleep(0.5)
    assert tool_events() == ["tool.draining"]

    ended = time.monotonic()
    session_end(session=b, actor=agent.actor)
    took = _wait_for(lambda: "tool.drained" in tool_events(), 2.0)
    time.sleep(1.0)  # a duplicate would show by now
    assert tool_events() == ["tool.draining", "tool.drained"]
    assert VersionTool.objects.filter(version=v1).get().signature.state == "drained"
    print(f"tool.drained {took:.2f}s after the last session ended ({time.monotonic() - ended:.2f}s incl. the wait)")


def test_the_periodic_drift_check_runs_on_the_worker(worker, bundle, publisher, ops, agent):  # noqa: F811
    from config.celery import app as celery_app
    from tests.mcp_server.test_mcp_tools import McpServer, declaring, publish

    server = McpServer()
    server.start(1)
    try:
        assert publish(publisher, declaring(server.url)).status_code == 201
        move(bundle, ops, "production", bundle.versions.get())
        session, _ = session_start(bundle=bundle, actor=agent.actor)
        server.start(2)
        # What beat sends every MCP_DRIFT_INTERVAL, by its scheduled name and route.
        celery_app.send_task("registry.tasks.mcp_drift_task")
        _wait_for(lambda: McpDrift.objects.exists(), 20.0)
        drift = McpDrift.objects.get()
        assert (drift.tool, drift.kind, drift.sessions_active) == ("lookup_order", "changed", 1)
    finally:
        server.stop()
