"""The access log (metrics.access): one line per request from both HTTP lanes, with route,
status, duration, request id, key prefix and session; in the JSON format its fields are keys of
the line; ACCESS_LOG=0 turns it off."""

import json
import logging

import pytest

from config.logformat import JsonFormatter
from sessions_app.services import session_start
from tests.edge.test_fastlane import _close_pool_connections, both  # noqa: F401 (the fixture is autouse)
from tests.mcp_server.test_mcp_limits import faq  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept():
    """The access logger's records (a handler of its own: the Django app the lanes start
    reconfigures the root logger's handlers)."""
    handler = _Kept()
    logger = logging.getLogger("registry.access")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


def test_each_lane_writes_one_access_line_per_request_with_its_ids(bundle, production, agent, settings, kept):
    settings.ACCESS_LOG = True
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    path = f"/api/v1/sessions/{session.pk}/bundle/"
    fast, slow = both("GET", path, agent.secret, **{"X-Request-ID": "req-evidence-1"})
    assert fast[0] == slow[0] == 200
    records = kept.records
    assert len(records) == 2  # one per lane
    prefix = agent.secret.split("_")[1] if agent.secret.count("_") >= 2 else None
    for record in records:
        access = record.access
        assert access["route"] == "api/v1/sessions/<uuid:session_id>/bundle/"
        assert access["status"] == 200 and access["method"] == "GET" and access["duration_ms"] >= 0
        assert access["request_id"] == "req-evidence-1"
        assert access["session_id"] == str(session.pk)
        assert access["key_prefix"] and (prefix is None or access["key_prefix"] in agent.secret)
        line = json.loads(JsonFormatter().format(record))
        assert line["route"] == access["route"] and line["request_id"] == "req-evidence-1"
        assert line["logger"] == "registry.access"
    kept.records.clear()
    settings.ACCESS_LOG = False
    both("GET", path, agent.secret)
    assert kept.records == []


@pytest.mark.usefixtures("faq")
def test_mcp_writes_its_access_line_too(settings, kept):
    """/mcp is a lane of its own (mcp_server.asgi): one line per request, route `mcp`, with the
    request id and the key's public prefix as sent."""
    from tests.mcp_server.test_mcp_limits import ACCEPT, _rpc, _run, _scope, _secret, _send_to

    settings.ACCESS_LOG = True
    secret = _secret("access-mcp")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}

    async def scenario(app):
        return await _send_to(app, _scope({**headers, "X-Request-ID": "req-mcp-1"}), [_rpc("list_capabilities")])

    status, _, _ = _run(scenario)
    assert status == 200
    (record,) = [r for r in kept.records if r.access["route"] == "mcp"]
    assert record.access["method"] == "POST" and record.access["status"] == 200
    assert record.access["request_id"] == "req-mcp-1"
    assert record.access["key_prefix"] and record.access["key_prefix"] in secret
    line = json.loads(JsonFormatter().format(record))
    assert line["route"] == "mcp" and line["logger"] == "registry.access"
