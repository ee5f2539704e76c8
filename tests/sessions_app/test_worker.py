"""End to end with a real Celery worker process: the README scenario over HTTP, and the drain
of a version within 2 seconds of its last session ending."""

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from registry import lifecycle
from sessions_app import tasks
from tests.live import QUEUES, celery_workers, database_url, purge_queues, worker_command  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker():
    """Real `celery worker` processes on the test database and the real broker: one for the
    `lifecycle` queue and one for `deliveries`, as `make run` and compose start them. Yields
    their output lines (both workers', interleaved)."""
    purge_queues()
    with celery_workers(*(worker_command(queue) for queue in QUEUES)) as lines:
        yield lines


class Http:
    def __init__(self, base: str, secret: str) -> None:
        self.base, self.secret = base, secret

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.secret}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(self, method: str, path: str, body: dict | None = None, expect: int = 200) -> dict:
        status, raw = self.call(method, path, body)
        assert status == expect, (method, path, status, raw)
        return json.loads(raw)


def _wait_for(predicate, seconds: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if predicate():
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds}s")


def test_the_readme_scenario_over_http_with_a_real_worker(live_server, worker):
    ops = Http(f"{live_server.url}/api/v1", api_key_create(name="ops", role=Role.OPS, actor=SYSTEM)[1])
    agent = Http(f"{live_server.url}/api/v1", api_key_create(name="agent", role=Role.AGENT, actor=SYSTEM)[1])

    def doc_with(tool: str) -> dict:
        schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
        return {
            "system_prompt": f"Refund orders with `{tool}`.",
            "tools": [{"name": tool, "description": "Refund an order.", "input_schema": schema}],
        }

    doc = doc_with("process_refund")

    ops.json("POST", "/bundles/", {"name": "refunds", "description": "demo"}, expect=201)
    ops.json("POST", "/bundles/refunds/versions/", {"content": doc, "message": "v1"}, expect=201)
    ops.json("PUT", "/bundles/refunds/labels/production/", {"version": 1, "reason": "first"}, expect=201)
    a = agent.json("POST", "/sessions/", {"bundle": "refunds"}, expect=201)
    a_bytes = agent.call("GET", f"/sessions/{a['id']}/bundle/")[1]

    doc2 = doc_with("issue_refund")  # the tool renamed
    ops.json("POST", "/bundles/refunds/versions/", {"content": doc2, "message": "v2"}, expect=201)
    # The rename is a breaking change: production requires compatibility, so say so explicitly.
    ops.json("PUT", "/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"}, expect=409)
    ops.json("PUT", "/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2", "allow_breaking": True})
    b = agent.json("POST", "/sessions/", {"bundle": "refunds"}, expect=201)
    assert agent.call("GET", f"/sessions/{a['id']}/bundle/") == (200, a_bytes)
    assert json.loads(a_bytes)["version"] == 1
    assert json.loads(agent.call("GET", f"/sessions/{b['id']}/bundle/")[1])["version"] == 2
    assert ops.json("GET", "/bundles/refunds/versions/1/")["state"] == "draining"

    agent.json("POST", f"/sessions/{a['id']}/end/")
    took = _wait_for(lambda: ops.json("GET", "/bundles/refunds/versions/1/")["state"] == "drained", 2.0)
    assert ops.json("GET", "/bundles/refunds/versions/1/")["drained_at"] is not None
    assert any('"version.drained"' in line for line in worker), "the worker emitted no version.drained event"

    ops.json("POST", "/bundles/refunds/labels/production/rollback/", {"to_version": 1, "reason": "v2 misbehaves"})
    c = agent.json("POST", "/sessions/", {"bundle": "refunds"}, expect=201)
    assert agent.call("GET", f"/sessions/{c['id']}/bundle/") == (200, a_bytes)
    assert ops.json("GET", "/bundles/refunds/versions/1/")["state"] == "live"
    print(f"v1 drained {took:.2f}s after its last session ended")


def test_a_task_delivered_twice_drains_once(live_server, worker, bundle, production, v2, agent, ops):
    """Redelivery (acks_late after a killed worker) and duplicates are harmless."""
    from registry.services import label_move
    from sessions_app.services import session_end, session_start

    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    session_end(session=session, actor=agent.actor)  # enqueues on commit
    for _ in range(3):
        lifecycle.enqueue_version_drain(session.version_id)
    _wait_for(lambda: sum('"version.drained"' in line for line in worker) >= 1, 2.0)
    time.sleep(0.5)
    assert sum('"version.drained"' in line for line in worker) == 1
    assert tasks.version_drain_task.acks_late is True
