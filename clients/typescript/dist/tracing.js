/** OpenTelemetry, as the Python client does it (client/promptreg/tracing.py). Every request
 * carries the W3C `traceparent` (and `tracestate`) of the caller's active span, so the
 * registry's spans join the agent's trace; and each session call sets on that span what the
 * registry sets on its own (`gen_ai.prompt.name`: the bundle, `gen_ai.prompt.version`: the
 * version number, the content hash and the session id), so an LLM call made in that span is
 * attributed to the pinned version in the tracing backend.
 *
 * Both come from `@opentelemetry/api` when the application has it installed (an optional peer
 * dependency, loaded on first use, never required). The `traceHeaders` hook given to the
 * Registry replaces the header lookup (only those two headers are taken from it); it does not
 * change the attributes, which need the API's active span. */
const TRACE_HEADERS = ["traceparent", "tracestate"];
// The same names as the registry's spans (its core/observe.py) and the Python client's.
const PROMPT_NAME = "gen_ai.prompt.name";
const PROMPT_VERSION = "gen_ai.prompt.version";
const CONTENT_HASH = "registry.content_hash";
const SESSION_ID = "registry.session.id";
let otel;
/** `@opentelemetry/api`, or null when it is not installed. The specifier is a variable so that
 * neither the compiler nor a bundler requires the package. */
function loadOtel() {
    if (otel === undefined) {
        const specifier = "@opentelemetry/api";
        otel = import(specifier).then((module) => (module.propagation ? module : (module.default ?? null)), () => null);
    }
    return otel;
}
/** The trace headers to send now: from `hook` when given, else from the active OpenTelemetry
 * context (empty without @opentelemetry/api, a registered propagator, or an active span). */
export async function traceHeaders(hook) {
    let carrier = {};
    if (hook) {
        carrier = hook() ?? {};
    }
    else {
        const api = await loadOtel();
        if (api === null)
            return {};
        api.propagation.inject(api.context.active(), carrier);
    }
    const out = {};
    for (const name of TRACE_HEADERS) {
        const value = carrier[name];
        if (typeof value === "string" && value)
            out[name] = value;
    }
    return out;
}
/** Set the pinned version's attributes on the caller's active span, if there is one and it
 * records; nothing without @opentelemetry/api. */
export async function annotate(pin) {
    const api = await loadOtel();
    if (api === null)
        return;
    // trace.getActiveSpan() spelled as in every 1.x release of the API (the peer range).
    const span = api.trace.getSpan(api.context.active());
    if (span === undefined || !span.isRecording())
        return;
    const attributes = {
        [PROMPT_NAME]: pin.bundle,
        [PROMPT_VERSION]: pin.version,
        [CONTENT_HASH]: pin.contentHash,
    };
    if (pin.sessionId)
        attributes[SESSION_ID] = pin.sessionId;
    span.setAttributes(attributes);
}
