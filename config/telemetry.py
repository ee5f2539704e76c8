"""Traces (OpenTelemetry), off unless the standard OTEL_* variables configure an exporter.

On when OTEL_TRACES_EXPORTER names one ("otlp", "console"; a list is allowed) or an OTLP
endpoint is given (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which
imply "otlp"); OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none keeps it off. The SDK
itself reads the rest: OTEL_SERVICE_NAME (default here "prompt-registry"),
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG) (default parentbased_always_on: an
agent's sampled traceparent is followed), OTEL_EXPORTER_OTLP_* (headers, timeout,
compression), OTEL_BSP_* (the batch span processor) and each instrumentation's own
variables (OTEL_PYTHON_DJANGO_EXCLUDED_URLS, ...). The OTLP exporter installed is HTTP with
protobuf (`http/protobuf`, port 4318); `grpc` is refused rather than silently not exported.

Off, nothing of OpenTelemetry is imported (`setup` returns before the first import) and the
request paths pay one `is None` test per note (core.observe). On, `setup` installs the SDK's
tracer provider with a batch span processor (spans are exported from a background thread,
never on the request's), the W3C trace-context propagator, and the maintained
instrumentations of Django, psycopg, Redis, Celery and httpx (webhook deliveries); the fast
lane, which bypasses Django, makes its own spans (api.fastlane). Every process calls it once,
before Django loads its middleware and database backend: config.asgi and config.wsgi (web),
config.celery (each worker process)."""

import logging
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "prompt-registry"
_EXPORTERS = ("otlp", "console", "none")
_done = False


def exporters(environ: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The span exporters the environment asks for (empty: tracing off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    for name in named:
        if name not in _EXPORTERS:
            raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER: {name!r} is not one of {', '.join(_EXPORTERS)}.")
    if not named and (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        named = ["otlp"]
    if "otlp" in named:
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol.strip() != "http/protobuf":
            raise ImproperlyConfigured(
                f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r}: only http/protobuf is installed (port 4318)."
            )
    return [name for name in named if name != "none"]


def setup() -> bool:
    """Turn tracing on in this process if the environment asks for it (once); True if on."""
    global _done
    if _done:
        return True
    names = exporters()
    if not names:
        return False
    _done = True

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*
        else:
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _instrument()

    from core import observe

    observe.tracing_on(trace)
    return True


def _instrument() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    # Django: a server span per request, the agent's traceparent its parent, inserted as the
    # outermost middleware (so before Django builds its handler). No request or response
    # headers are recorded unless OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_* asks (never
    # ask for Authorization: it is the API key).
    DjangoInstrumentor().instrument(request_hook=_redact_request_urls)
    # psycopg: statements with their placeholders (db.statement), never their parameters;
    # no SQL comments added (they would defeat the fast lane's prepared statements).
    PsycopgInstrumentor().instrument(enable_commenter=False)
    RedisInstrumentor().instrument()  # commands with their arguments as "?"
    CeleryInstrumentor().instrument()  # the trace context travels in the task message's headers
    HTTPXClientInstrumentor().instrument()  # webhook deliveries


def _redact_request_urls(span: Any, request: Any) -> None:
    """The Django span's URL attributes without the query's secrets (core.observe.redacted_query):
    the instrumentation records the full URL and the target, an OIDC callback's code and state
    included, before it calls this hook; each is rewritten here, in the old (http.url,
    http.target) and the new (url.full, url.query) conventions alike."""
    from core import observe

    query = request.META.get("QUERY_STRING", "")
    if span is None or not span.is_recording() or not query:
        return
    kept = observe.redacted_query(request.path, query)
    recorded = getattr(span, "attributes", None) or {}
    for name in ("http.url", "url.full", "http.target"):
        value = recorded.get(name)
        if isinstance(value, str) and "?" in value:
            base = value.partition("?")[0]
            span.set_attribute(name, f"{base}?{kept}" if kept else base)
    if "url.query" in recorded:
        span.set_attribute("url.query", kept)


def tracer() -> Any:
    """The registry's own tracer (the fast lane's spans); only called when tracing is on."""
    from opentelemetry import trace

    return trace.get_tracer("registry")
