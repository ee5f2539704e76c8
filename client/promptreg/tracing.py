"""OpenTelemetry, when the application has it installed (an optional dependency: `pip install
promptreg[otel]` or any opentelemetry-api): every request carries the W3C `traceparent` of the
caller's current span, so the registry's spans join the agent's trace, and each session call
sets on that span what the registry sets on its own (`gen_ai.prompt.name`: the bundle,
`gen_ai.prompt.version`: the version number, the content hash and the session id), so an LLM
call made in that span is attributed to the pinned version in the tracing backend.

Without opentelemetry-api, both are no-ops costing one `is None` test."""

from __future__ import annotations

from typing import Any

try:  # optional: the client's one required dependency stays httpx
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where opentelemetry is absent
    _propagate = None
    _trace = None

# The same names as the registry's spans (its core/observe.py).
PROMPT_NAME = "gen_ai.prompt.name"
PROMPT_VERSION = "gen_ai.prompt.version"
CONTENT_HASH = "registry.content_hash"
SESSION_ID = "registry.session.id"


def with_trace_context(headers: dict[str, str] | None) -> dict[str, str] | None:
    """`headers` plus `traceparent` (and `tracestate`) of the current span, if any."""
    if _propagate is None:
        return headers
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    if not carrier:
        return headers
    return {**(headers or {}), **carrier}


def annotate(*, bundle: str, version: int, content_hash: str, session_id: str) -> None:
    """Set the pinned version's attributes on the caller's current span (if it records)."""
    if _trace is None:
        return
    span: Any = _trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {PROMPT_NAME: bundle, PROMPT_VERSION: version, CONTENT_HASH: content_hash}
    if session_id:
        attributes[SESSION_ID] = session_id
    span.set_attributes(attributes)
