"""Traces (config.telemetry) end to end: the real web server and Celery worker with the OTLP/HTTP
exporter pointed at a receiver in the test (tests/otlp.py), the Python client calling from
inside a span of the test's own, so that the trace id it propagates can be followed through the
registry's spans into the worker's."""

import json
import os
import subprocess
import sys

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from promptreg import Registry, tracing

from access.models import Role
from config import telemetry
from core import observe
from registry.models import Bundle
from registry.services import bundle_create, label_move, version_publish
from tests.conftest import content, make_api
from tests.live import WebServer, celery_workers, purge_queues, worker_command
from tests.otlp import OtlpReceiver, Span

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

MARKER = "OTTER-MARKER-81f3"  # prompt content: never in a span
SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "registry-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds: export soon, the test waits for it
    }


@pytest.fixture
def receiver():
    with OtlpReceiver() as running:
        yield running


@pytest.fixture
def caller():
    """The agent's own tracer (not the global one: the test process does not trace itself)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("agent"), exporter


def published(ops_actor, name: str = "support") -> Bundle:
    bundle = bundle_create(name=name, description="d", actor=ops_actor)
    version_publish(bundle=bundle, content=content(f"Be kind. {MARKER}"), message="v1", actor=ops_actor)
    label_move(bundle=bundle, name="production", version=bundle.versions.get(number=1), actor=ops_actor, reason="go")
    return bundle


def test_it_is_off_unless_an_exporter_or_endpoint_is_configured():
    assert telemetry.exporters({}) == []
    assert telemetry.exporters({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}) == []
    assert telemetry.exporters({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert telemetry.exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ["otlp"]
    assert telemetry.exporters({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}) == ["otlp"]
    assert telemetry.exporters({"OTEL_TRACES_EXPORTER": "console,otlp"}) == ["console", "otlp"]
    assert telemetry.exporters({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) == []


def test_it_refuses_an_exporter_or_protocol_it_cannot_honour():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="zipkin"):
        telemetry.exporters({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(ImproperlyConfigured, match="http/protobuf"):
        telemetry.exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_an_unknown_log_format_is_refused_at_start():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "LOG_FORMAT": "xml"}
    out = subprocess.run(
        [sys.executable, "-c", "import config.asgi"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0 and "LOG_FORMAT must be plain or json, got 'xml'" in out.stderr


def test_a_process_without_otel_configured_loads_no_tracing():
    """Off, the registry imports nothing of tracing: no SDK tracer, exporter or instrumentation
    (redis-py imports opentelemetry's metrics SDK on its own whenever it is installed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    code = (
        "import sys, config.asgi, config.celery\n"
        "prefixes = ('opentelemetry.sdk.trace', 'opentelemetry.instrumentation', 'opentelemetry.exporter')\n"
        "print(sorted(m for m in sys.modules if m.startswith(prefixes)))\n"
        "from core import observe\n"
        "assert observe.tracing() is None\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert observe.tracing() is None  # nor in the test process


def _one(spans: list[Span]) -> Span:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_a_session_call_through_django_joins_the_agents_trace_with_the_pinned_version(receiver, caller):
    tracer, agent_spans = caller
    ops = make_api(Role.OPS, name="otel-ops")
    agent = make_api(Role.AGENT, name="otel-agent")
    published(ops.actor)
    server = WebServer(env=otel_env(receiver))
    server.start()
    try:
        with Registry(server.url, agent.secret) as client, tracer.start_as_current_span("agent turn") as turn:
            session = client.start_session("support")
            # The session's own page is Django's (the fast lane serves only the per-turn calls).
            detail = client.json("GET", f"api/v1/sessions/{session.id}/")
        assert detail["version"] == 1
        # A malformed traceparent (and an oversized tracestate) is ignored: the call is answered
        # and its span starts a trace of its own.
        hostile = {"traceparent": "00-" + "z" * 4000, "tracestate": "k=" + "v" * 6000, "X-Request-ID": "otel-hostile"}
        fetched = httpx.get(
            f"{server.url}/api/v1/sessions/{session.id}/bundle/",
            headers={"Authorization": f"Bearer {agent.secret}", **hostile},
        )
        assert fetched.status_code == 200
        orphan = _one(
            receiver.wait_for(
                lambda s: (
                    s.name == "GET api/v1/sessions/<uuid:session_id>/bundle/"
                    and s.trace_id != f"{turn.get_span_context().trace_id:032x}"
                )
            )
        )
        assert orphan.parent_span_id == "" and orphan.attributes[observe.SESSION_ID] == session.id
        django_span = _one(
            receiver.wait_for(
                lambda s: s.kind == SERVER and s.attributes.get("http.route") == "api/v1/sessions/<uuid:session_id>/"
            )
        )
    finally:
        server.stop()

    trace_id = f"{turn.get_span_context().trace_id:032x}"
    assert django_span.service == "registry-under-test"
    assert django_span.trace_id == trace_id  # the agent's traceparent was honoured
    assert django_span.parent_span_id == f"{turn.get_span_context().span_id:016x}"
    assert django_span.attributes[observe.PROMPT_NAME] == "support"
    assert django_span.attributes[observe.PROMPT_VERSION] == 1
    assert django_span.attributes[observe.CONTENT_HASH] == session.content_hash
    assert django_span.attributes[observe.SESSION_ID] == session.id
    assert django_span.attributes[observe.KEY_PREFIX] == agent.secret[:10]
    # Its SQL is traced beneath it (psycopg), with placeholders, never values.
    sql = receiver.wait_for(
        lambda s: s.kind == CLIENT and s.parent_span_id == django_span.span_id and "db.statement" in s.attributes
    )
    assert any("sessions_app_session" in s.attributes["db.statement"] for s in sql)

    # The client set the same attributes on the agent's span.
    (finished,) = [s for s in agent_spans.get_finished_spans() if s.name == "agent turn"]
    assert finished.attributes[observe.PROMPT_NAME] == "support"
    assert finished.attributes[observe.PROMPT_VERSION] == 1
    assert finished.attributes[observe.CONTENT_HASH] == session.content_hash
    assert finished.attributes[observe.SESSION_ID] == session.id

    # No span holds prompt content or the key's secret.
    everything = b"".join(receiver.payloads)
    assert MARKER.encode() not in everything
    assert agent.secret.encode() not in everything


def test_no_span_carries_an_oidc_code_or_a_secret_query_parameter(receiver):
    # Issue 36: Django's spans recorded the whole URL, an OIDC callback's code and state included.
    agent = make_api(Role.AGENT, name="otel-query")
    server = WebServer(env=otel_env(receiver))
    server.start()
    try:
        httpx.get(f"{server.url}/admin/sso/callback/?code=CODE-0f3a&state=STATE-9b1c&next=/admin/")
        httpx.get(
            f"{server.url}/api/v1/bundles/?limit=5&token=TOKEN-77d2&KEY=KEY-5e60&state=STATE-2a11",
            headers={"Authorization": f"Bearer {agent.secret}"},
        )
        callback = _one(receiver.wait_for(lambda s: s.kind == SERVER and "sso/callback" in str(s.attributes)))
        listing = _one(
            receiver.wait_for(lambda s: s.kind == SERVER and "api/v1/bundles/" in str(s.attributes.get("http.route")))
        )
    finally:
        server.stop()
    everything = b"".join(receiver.payloads)
    for secret in (b"CODE-0f3a", b"STATE-9b1c", b"TOKEN-77d2", b"KEY-5e60", b"STATE-2a11"):
        assert secret not in everything
    assert callback.attributes["http.url"].endswith("/admin/sso/callback/")  # an auth route: no query at all
    target = listing.attributes["http.url"]
    assert "limit=5" in target and "token=REDACTED" in target and "KEY=REDACTED" in target


def _json_lines(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


@pytest.fixture
def traced_worker(receiver):
    """A real `celery worker` on the lifecycle queue, tracing to the receiver, logging JSON."""
    purge_queues()
    with celery_workers(
        worker_command("lifecycle", name="otel"), env={**otel_env(receiver), "LOG_FORMAT": "json"}
    ) as lines:
        yield lines


def test_fast_lane_calls_and_the_task_they_cause_continue_the_agents_trace(receiver, caller, traced_worker):
    tracer, _ = caller
    ops = make_api(Role.OPS, name="otel-ops")
    agent = make_api(Role.AGENT, name="otel-agent")
    bundle = published(ops.actor)
    server = WebServer(env={**otel_env(receiver), "LOG_FORMAT": "json"})
    server.start()
    try:
        with Registry(server.url, agent.secret) as client, tracer.start_as_current_span("agent turn") as turn:
            session = client.start_session("support")  # the fast lane: start, then the fetch
            assert MARKER in json.dumps(session.bundle.content)
            for _ in range(5):  # the key's last use is fresh now: these are batched
                session.heartbeat()
            # v1 starts draining (its drain is enqueued by the move, in this trace too); ending
            # its last session (a body on an end, an outcome's place: the fast lane, one by one) enqueues another,
            # which drains it.
            version_publish(bundle=bundle, content=content("v2"), message="v2", actor=ops.actor)
            with Registry(server.url, ops.secret) as ops_client:
                ops_client.request(
                    "PUT", "api/v1/bundles/support/labels/production/", json={"version": 2, "reason": "v2"}
                )
            client.request("POST", f"api/v1/sessions/{session.id}/end/", json={})
            # An ended session's bundle through Django (HEAD is Django's): a 410 that Django logs.
            headers = tracing.with_trace_context(
                {"Authorization": f"Bearer {agent.secret}", "X-Request-ID": "otel-req-1"}
            )
            gone = httpx.head(f"{server.url}/api/v1/sessions/{session.id}/bundle/", headers=headers)
            assert gone.status_code == 410
        trace_id = f"{turn.get_span_context().trace_id:032x}"
        in_trace = lambda s: s.trace_id == trace_id  # noqa: E731
        # Wait, while the server still runs, for every span asserted on below: a span that ends
        # just before the server is stopped may never be flushed, and the web's spans and the
        # worker's reach the receiver in no fixed order (CI once saw both drains before the end).
        is_end = lambda s: s.name.startswith("POST api/v1/sessions/<uuid:session_id>/end/")  # noqa: E731
        (end_seen,) = receiver.wait_for(lambda s: in_trace(s) and is_end(s))
        published_by_end = lambda: {s.span_id for s in receiver.spans if s.parent_span_id == end_seen.span_id}  # noqa: E731
        receiver.wait_for(lambda s: s.kind == CONSUMER and "drain" in s.name and s.parent_span_id in published_by_end())
        receiver.wait_for(lambda s: in_trace(s) and s.name == "POST api/v1/sessions/")
        receiver.wait_for(lambda s: in_trace(s) and s.name == "GET api/v1/sessions/<uuid:session_id>/bundle/")
        drains = receiver.wait_for(lambda s: in_trace(s) and s.kind == CONSUMER and "drain" in s.name, count=2)
        heartbeats = receiver.wait_for(
            lambda s: in_trace(s) and s.name.startswith("POST api/v1/sessions/<uuid:session_id>/heartbeat/"), count=5
        )
    finally:
        server.stop()

    agent_span_id = f"{turn.get_span_context().span_id:016x}"
    start = _one([s for s in receiver.spans if in_trace(s) and s.name == "POST api/v1/sessions/"])
    fetch = _one(
        [s for s in receiver.spans if in_trace(s) and s.name == "GET api/v1/sessions/<uuid:session_id>/bundle/"]
    )
    for span in (start, fetch, *heartbeats):
        assert span.kind == SERVER and span.parent_span_id == agent_span_id
        assert span.attributes["registry.lane"] == "fast"
        assert span.attributes[observe.PROMPT_NAME] == "support"
        assert span.attributes[observe.PROMPT_VERSION] == 1
        assert span.attributes[observe.CONTENT_HASH] == session.content_hash
        assert span.attributes[observe.SESSION_ID] == session.id
        assert span.attributes[observe.KEY_PREFIX] == agent.secret[:10]
        assert span.attributes["http.status_code"] in (200, 201)
    # Batched calls: each its own span, linked to the span of the batch that answered it.
    batches = {s.span_id: s for s in receiver.spans if s.name == "fast lane batch"}
    linked = [s for s in heartbeats if any(span_id in batches for _, span_id in s.links)]
    assert linked, "no heartbeat was answered in a batch"
    for span in linked:
        (batch_id,) = [span_id for _, span_id in span.links if span_id in batches]
        assert batches[batch_id].attributes["registry.batch.size"] >= 1
    # The drain continues the trace of the request that ended the session (Django's span, then
    # the task's publication, then the worker's run).
    end_span = _one([s for s in receiver.spans if in_trace(s) and is_end(s)])
    assert end_span.kind == SERVER and end_span.parent_span_id == agent_span_id
    assert end_span.attributes["registry.lane"] == "fast"  # an end with a body: one by one, not batched
    assert end_span.attributes[observe.SESSION_ID] == session.id
    by_id = {s.span_id: s for s in receiver.spans}
    published_by = [by_id[drain.parent_span_id] for drain in drains]
    assert all(p.kind == PRODUCER and p.service == "registry-under-test" for p in published_by)
    assert end_span.span_id in [p.parent_span_id for p in published_by]

    # JSON logs: the web's 410 line and the worker's drained line, with their context.
    web = _json_lines(server.output)
    # (the access log writes its own line for the request too: metrics.access, tests/access/test_access_log.py)
    (gone_line,) = [
        line for line in web if line.get("request_id") == "otel-req-1" and line["logger"] != "registry.access"
    ]
    assert gone_line["level"] == "WARNING" and gone_line["logger"] == "django.request"
    assert gone_line["key_prefix"] == agent.secret[:10]
    assert gone_line["session_id"] == session.id and gone_line["bundle"] == "support" and gone_line["version"] == 1
    assert gone_line["trace_id"] == trace_id and len(gone_line["span_id"]) == 16
    assert {"time", "level", "logger", "message"} <= set(gone_line)
    worker_lines = _json_lines(traced_worker)
    (drained,) = [line for line in worker_lines if "version.drained" in line["message"]]
    assert drained["task"] == "sessions_app.tasks.version_drain_task" and drained["task_id"]
    assert drained["trace_id"] == trace_id

    # Neither prompt content nor the key's secret in any span or log line.
    everything = b"".join(receiver.payloads) + "".join(server.output + traced_worker).encode()
    assert MARKER.encode() not in everything
    assert agent.secret.encode() not in everything and ops.secret.encode() not in everything


def test_mcp_tool_calls_on_a_session_carry_the_pinned_version_in_the_agents_trace(receiver, caller):
    """/mcp: the MCP SDK's span of each tool call (the child of the host's traceparent, sent in
    the request's `_meta` as MCP propagates it) carries the session's pinned version, and the
    call's SQL is beneath it."""
    tracer, _ = caller
    ops = make_api(Role.OPS, name="otel-mcp-ops")
    agent = make_api(Role.AGENT, name="otel-mcp-agent")
    published(ops.actor, "mcp-support")
    server = WebServer(env=otel_env(receiver))
    server.start()
    headers = {
        "Authorization": f"Bearer {agent.secret}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }

    def call(n: int, tool: str, arguments: dict, meta: dict) -> dict:
        params = {"name": tool, "arguments": arguments, "_meta": meta}
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
        answer = httpx.post(f"{server.url}/mcp", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert not result.get("isError"), result
        return result["structuredContent"]

    try:
        with tracer.start_as_current_span("host turn") as turn:
            context = turn.get_span_context()
            meta = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-01"}
            protocol = call(1, "get_capability_protocol", {"capability": "mcp-support"}, meta)
            again = {"capability": "mcp-support", "session_id": protocol["session_id"]}
            call(2, "get_capability_protocol", again, meta)
            call(3, "end_session", {"session_id": protocol["session_id"]}, meta)
        spans = receiver.wait_for(lambda s: s.kind == SERVER and s.name.startswith("tools/call "), count=3)
        first = next(s for s in spans if s.name == "tools/call get_capability_protocol")
        sql = receiver.wait_for(lambda s: s.kind == CLIENT and s.parent_span_id == first.span_id)
    finally:
        server.stop()

    assert sorted(s.name for s in spans) == [
        "tools/call end_session",
        "tools/call get_capability_protocol",
        "tools/call get_capability_protocol",
    ]
    for span in spans:
        assert span.trace_id == f"{context.trace_id:032x}" and span.parent_span_id == f"{context.span_id:016x}"
        assert span.attributes[observe.PROMPT_NAME] == "mcp-support"
        assert span.attributes[observe.PROMPT_VERSION] == 1
        assert span.attributes[observe.CONTENT_HASH] == protocol["content_hash"]
        assert span.attributes[observe.SESSION_ID] == protocol["session_id"]
    assert sql
    assert MARKER.encode() not in b"".join(receiver.payloads)
