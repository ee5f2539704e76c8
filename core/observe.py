"""What a call is about, for its trace span and its log lines: the one interface through which
services and entry points report the key and session they act for, whatever reads it (the
tracing set up by config.telemetry, the JSON log format of config.logformat).

A request starts its notes with `begin()` (the Django middleware and the fast lane do); the
key prefix and the session are noted as they become known, and every log line written while
the request runs carries them. `session_used` also sets the OpenTelemetry GenAI attributes
(`gen_ai.prompt.name`, `gen_ai.prompt.version`) on the current span when tracing is on.

Nothing here imports OpenTelemetry: config.telemetry hands its trace module over when it sets
tracing up (`tracing_on`), so a process without OTEL_* configured never imports it, and each
call costs one `is None` test."""

from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

# The attribute names on a session call's span: the GenAI semantic conventions' gen_ai.prompt.name
# (the bundle) and gen_ai.prompt.version (the version number, an integer), then the registry's own.
PROMPT_NAME = "gen_ai.prompt.name"
PROMPT_VERSION = "gen_ai.prompt.version"
CONTENT_HASH = "registry.content_hash"
SESSION_ID = "registry.session.id"
KEY_PREFIX = "registry.key.prefix"


@dataclass
class Notes:
    """What one request is about, as far as it is known (never a secret, never content)."""

    key_prefix: str = ""
    session_id: str = ""
    bundle: str = ""
    version: int | None = None
    # The request's span when its notes began: for a line written once the span is no longer
    # current (Django logs a 4xx or 5xx answer after its middleware, the tracing one included).
    trace_ids: tuple[str, str] | None = None


current: ContextVar[Notes | None] = ContextVar("observe_notes", default=None)
_trace: Any = None  # opentelemetry.trace once config.telemetry turned tracing on


def tracing_on(trace_module: Any) -> None:
    """Called once by config.telemetry after it installed a tracer provider."""
    global _trace
    _trace = trace_module


def tracing() -> Any:
    """opentelemetry.trace when tracing is on, else None."""
    return _trace


def begin() -> Token[Notes | None]:
    """Start the notes of a request (pass the token to `end`)."""
    return current.set(Notes(trace_ids=trace_ids()))


def end(token: Token[Notes | None]) -> None:
    current.reset(token)


def key_used(prefix: str) -> None:
    """The key the call authenticated with, by its public prefix (the secret never comes here)."""
    notes = current.get()
    if notes is not None:
        notes.key_prefix = prefix
    if _trace is not None:
        _trace.get_current_span().set_attribute(KEY_PREFIX, prefix)


def session_used(*, session_id: object, bundle: str, version: int, content_hash: str, span: Any = None) -> None:
    """The session a call acts on and what it is pinned to: noted for the logs and set on
    `span` (default: the current span) when tracing is on."""
    notes = current.get()
    if notes is not None:
        notes.session_id, notes.bundle, notes.version = str(session_id), bundle, version
    if _trace is not None:
        (span if span is not None else _trace.get_current_span()).set_attributes(
            session_attributes(session_id=session_id, bundle=bundle, version=version, content_hash=content_hash)
        )


def session_attributes(*, session_id: object, bundle: str, version: int, content_hash: str) -> dict[str, Any]:
    return {
        PROMPT_NAME: bundle,
        PROMPT_VERSION: version,
        CONTENT_HASH: content_hash,
        SESSION_ID: str(session_id),
    }


# A turn's reported usage (the GenAI conventions' usage attributes; input tokens include the
# cached ones, as the conventions ask) and a score (their `gen_ai.evaluation.result` event).
USAGE_ATTRIBUTES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
    "model": "gen_ai.response.model",
}
EVALUATION_EVENT = "gen_ai.evaluation.result"


def usage_reported(figures: dict[str, Any]) -> None:
    """The previous model call's usage a turn reported, on the current span (tracing on);
    `figures`: neutral names (evidence.report.Usage's) to values, None for not reported."""
    if _trace is None:
        return
    attributes = {USAGE_ATTRIBUTES[k]: v for k, v in figures.items() if k in USAGE_ATTRIBUTES and v is not None}
    if figures.get("stop_reason") is not None:
        attributes["gen_ai.response.finish_reasons"] = [figures["stop_reason"]]
    if attributes:
        _trace.get_current_span().set_attributes(attributes)


def score_recorded(*, name: str, value: float, source: str, comment: str) -> None:
    """A session's score as a `gen_ai.evaluation.result` event on the current span (whose
    attributes carry the pin: gen_ai.prompt.name / gen_ai.prompt.version, session_used)."""
    if _trace is None:
        return
    attributes: dict[str, Any] = {"gen_ai.evaluation.name": name, "gen_ai.evaluation.score.value": value}
    if source:
        attributes["registry.evaluation.source"] = source
    if comment:
        attributes["gen_ai.evaluation.explanation"] = comment[:1000]
    _trace.get_current_span().add_event(EVALUATION_EVENT, attributes)


def trace_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span in hex, or None (tracing off, or no span)."""
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


# Query strings in traces and logs (issue 36): an OIDC callback's query is the authorization code
# and its state, and any route may be handed a token in a parameter. Auth routes lose their query
# altogether; elsewhere these parameters keep their names but not their values.
AUTH_PATH_PREFIXES = ("/admin/sso/", "/admin/login/", "/admin/logout/")
SECRET_PARAMETERS = frozenset({"code", "state", "token", "key", "access_token", "id_token", "api_key"})
REDACTED = "REDACTED"


def redacted_query(path: str, query: str) -> str:
    """`query` as traces and logs may carry it for a request to `path`: empty on an auth route,
    else each secret parameter's value replaced (names compared without case)."""
    if not query or path.startswith(AUTH_PATH_PREFIXES):
        return ""
    parts = []
    for part in query.split("&"):
        name, sep, _ = part.partition("=")
        parts.append(f"{name}={REDACTED}" if sep and name.lower() in SECRET_PARAMETERS else part)
    return "&".join(parts)


def redacted_target(path: str, query: str) -> str:
    """The path and, when anything is left of it, the redacted query."""
    kept = redacted_query(path, query)
    return f"{path}?{kept}" if kept else path
