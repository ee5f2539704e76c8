"""The audit log and the logs (plain and JSON) never hold prompt or tool content, nor any key's
secret; tests/metrics/test_telemetry.py checks the spans and the JSON lines of a live server and worker."""

import logging

import pytest

from access.models import Role
from audit.models import AuditEvent
from config.logformat import JsonFormatter
from tests.conftest import content, make_api

MARKER = "ZEBRA-MARKER-5d1c"


@pytest.mark.django_db
def test_no_log_line_or_audit_row_holds_content_or_a_secret(caplog, capfd):
    caplog.set_level(logging.DEBUG)
    ops = make_api(Role.OPS, name="leak-ops")
    agent = make_api(Role.AGENT, name="leak-agent")
    doc = content(f"Secret instructions {MARKER}.")
    doc["tools"][0]["description"] = f"tool text {MARKER}"

    ops.post("/api/v1/bundles/", {"name": "leaky", "description": "d"})
    ops.post("/api/v1/bundles/leaky/versions/", {"content": doc, "message": "v1"})
    ops.post("/api/v1/bundles/leaky/versions/", {"content": {**doc, "extra": MARKER}, "message": "bad"})  # 400
    ops.post("/api/v1/bundles/leaky/versions/", f'{{"content": "{MARKER}', content_type="application/json")  # 400
    ops.put("/api/v1/bundles/leaky/labels/production/", {"version": 1, "reason": "go"})
    session = agent.post("/api/v1/sessions/", {"bundle": "leaky"}).json()
    assert MARKER.encode() in agent.get(f"/api/v1/sessions/{session['id']}/bundle/").content  # it was served
    agent.post(f"/api/v1/sessions/{session['id']}/end/")
    agent.client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent.secret}x")  # a wrong key is logged as a 401
    assert agent.get("/api/v1/bundles/").status_code == 401

    captured = capfd.readouterr()
    as_json = JsonFormatter()  # LOG_FORMAT=json: every field of every line
    logged = "\n".join(
        [r.getMessage() for r in caplog.records]
        + [str(r.args) for r in caplog.records]
        + [as_json.format(r) for r in caplog.records]
        + [captured.out, captured.err]
    )
    rows = "\n".join(str(row) for row in AuditEvent.objects.values())
    assert len(caplog.records) > 0 and AuditEvent.objects.count() >= 3  # there was something to search
    for needle in (MARKER, ops.secret, agent.secret, agent.secret[10:]):
        assert needle not in logged
        assert needle not in rows
