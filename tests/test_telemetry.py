"""Traces (config.telemetry) end to end: the real web server and Celery worker with the OTLP/HTTP
exporter pointed at a receiver in the test (tests/otlp.py), the Python client calling from
inside a span of the test's own, so that the trace id it propagates can be followed through the
registry's spans into the worker's."""

import os

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from promptreg import Registry

from access.models import Role
from config import telemetry
from core import observe
from registry.models import Bundle
from registry.services import bundle_create, label_move, version_publish
from tests.conftest import content, make_api
from tests.live import WebServer
from tests.otlp import OtlpReceiver, Span
from tests.test_worker import worker  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

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


def test_a_process_without_otel_configured_loads_no_tracing():
    """Off, the registry imports nothing of tracing: no SDK tracer, exporter or instrumentation
    (redis-py imports opentelemetry's metrics SDK on its own whenever it is installed)."""
    import subprocess
    import sys

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
