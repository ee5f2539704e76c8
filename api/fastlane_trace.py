"""The fast lane's spans (api.fastlane bypasses Django, so Django's instrumentation never sees
its calls). Each call gets a server span of its own, named and attributed as Django's are
(`GET api/v1/sessions/<uuid:session_id>/bundle/`, http.method, http.route, http.status_code),
the child of the agent's `traceparent` when it sent one. A call answered one by one runs with
its span current on the pool thread, so its SQL, Redis and task spans are its children and the
session rules (core.observe) put the pinned version on it. A batch has a span of its own on
the pool thread that answers it (its SQL and Redis beneath it, the child of its first call's
span); each call answered in the batch gets the pinned version on its own span and a link to
the batch's.

Every function here is a no-op (returning None) while tracing is off (core.observe.tracing)."""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from core import observe

_PROPAGATED = (b"traceparent", b"tracestate", b"baggage")
SPAN_DECLINED = "registry.fastlane.declined"


def request_span(*, method: str, route: str, headers: dict[bytes, bytes], key_prefix: str | None) -> Any:
    """Start the server span of one call (None while tracing is off)."""
    trace = observe.tracing()
    if trace is None:
        return None
    from opentelemetry import propagate

    carrier = {name.decode(): headers[name].decode("latin1") for name in _PROPAGATED if name in headers}
    attributes: dict[str, Any] = {"http.method": method, "http.route": route, "registry.lane": "fast"}
    if key_prefix:
        attributes[observe.KEY_PREFIX] = key_prefix
    return trace.get_tracer("registry.fastlane").start_span(
        f"{method} {route}",
        context=propagate.extract(carrier),
        kind=trace.SpanKind.SERVER,
        attributes=attributes,
    )


def current(span: Any) -> Any:
    """A context manager that makes `span` current (on the pool thread that runs the call)."""
    if span is None:
        return nullcontext()
    return observe.tracing().use_span(span, end_on_exit=False)


def answered(span: Any, status: int) -> None:
    if span is None:
        return
    span.set_attribute("http.status_code", status)
    if status >= 500:
        span.set_status(observe.tracing().Status(observe.tracing().StatusCode.ERROR))
    span.end()


def declined(span: Any) -> None:
    """The call went on to Django, whose own span answers it: this one ends, marked so."""
    if span is None:
        return
    span.set_attribute(SPAN_DECLINED, True)
    span.end()


@contextmanager
def batch(size: int, spans: list[Any]) -> Iterator[None]:
    """The span of one batch (current while it runs), linked from each call's span. It is the
    child of its first call's span: under light load most batches hold one call, whose trace
    then holds the batch's SQL and the tasks it enqueues; the other calls reach it by the link."""
    trace = observe.tracing()
    if trace is None:
        yield
        return
    first = next((span for span in spans if span is not None), None)
    parent = trace.set_span_in_context(first) if first is not None else None
    with trace.get_tracer("registry.fastlane").start_as_current_span(
        "fast lane batch", context=parent, attributes={"registry.batch.size": size}
    ) as span:
        context = span.get_span_context()
        for call_span in spans:
            if call_span is not None:
                call_span.add_link(context)
        yield


def session(span: Any, *, session_id: object, bundle: str, version: int, content_hash: str) -> None:
    """The pinned version on a batched call's own span (not the batch's, which is current)."""
    if span is not None:
        observe.session_used(
            session_id=session_id, bundle=bundle, version=version, content_hash=content_hash, span=span
        )
