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
/** Returns the trace headers of the current call (any other key is ignored). */
export type TraceHeaders = () => Record<string, string> | undefined;
/** The trace headers to send now: from `hook` when given, else from the active OpenTelemetry
 * context (empty without @opentelemetry/api, a registered propagator, or an active span). */
export declare function traceHeaders(hook?: TraceHeaders): Promise<Record<string, string>>;
/** What a session is pinned to, as annotate sets it. */
export interface Pin {
    bundle: string;
    version: number;
    contentHash: string;
    /** Empty for an offline session (from a snapshot): then no session id is set. */
    sessionId: string;
}
/** Set the pinned version's attributes on the caller's active span, if there is one and it
 * records; nothing without @opentelemetry/api. */
export declare function annotate(pin: Pin): Promise<void>;
