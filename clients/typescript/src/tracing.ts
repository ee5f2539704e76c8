/** W3C trace context, as the Python client does it: every request carries the `traceparent`
 * (and `tracestate`) of the caller's active span, so the registry's spans join the agent's
 * trace. The context comes from `@opentelemetry/api` when the application has it installed (an
 * optional peer dependency, loaded on first use, never required), or from the `traceHeaders`
 * hook given to the Registry, which replaces that lookup. Only those two headers are taken. */

const TRACE_HEADERS = ["traceparent", "tracestate"] as const;

/** Returns the trace headers of the current call (any other key is ignored). */
export type TraceHeaders = () => Record<string, string> | undefined;

interface OtelApi {
  context: { active(): unknown };
  propagation: { inject(context: unknown, carrier: Record<string, string>): void };
}

let otel: Promise<OtelApi | null> | undefined;

/** `@opentelemetry/api`, or null when it is not installed. The specifier is a variable so that
 * neither the compiler nor a bundler requires the package. */
function loadOtel(): Promise<OtelApi | null> {
  if (otel === undefined) {
    const specifier = "@opentelemetry/api";
    otel = import(specifier).then(
      (module: { default?: OtelApi } & Partial<OtelApi>) => (module.propagation ? (module as OtelApi) : (module.default ?? null)),
      () => null,
    );
  }
  return otel;
}

/** The trace headers to send now: from `hook` when given, else from the active OpenTelemetry
 * context (empty without @opentelemetry/api, a registered propagator, or an active span). */
export async function traceHeaders(hook?: TraceHeaders): Promise<Record<string, string>> {
  let carrier: Record<string, string> = {};
  if (hook) {
    carrier = hook() ?? {};
  } else {
    const api = await loadOtel();
    if (api === null) return {};
    api.propagation.inject(api.context.active(), carrier);
  }
  const out: Record<string, string> = {};
  for (const name of TRACE_HEADERS) {
    const value = carrier[name];
    if (typeof value === "string" && value) out[name] = value;
  }
  return out;
}
