/** A span that records its attributes, for the tests that check what the client sets on the
 * caller's active span: the Span interface of @opentelemetry/api with nothing exported, which
 * is all an SDK span adds that these tests look at. Not a test file itself (no `.test.`). */

import { context, trace } from "@opentelemetry/api";
import type { Span, SpanAttributeValue, SpanAttributes, SpanContext } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";

let spans = 0;

export class RecordingSpan implements Span {
  readonly attributes: SpanAttributes = {};
  private readonly context: SpanContext;

  constructor(traceId = "0af7651916cd43dd8448eb211c80319c") {
    spans++;
    this.context = { traceId, spanId: spans.toString(16).padStart(16, "0"), traceFlags: 1 };
  }

  spanContext(): SpanContext {
    return this.context;
  }
  setAttribute(key: string, value: SpanAttributeValue): this {
    this.attributes[key] = value;
    return this;
  }
  setAttributes(attributes: SpanAttributes): this {
    Object.assign(this.attributes, attributes);
    return this;
  }
  addEvent(): this {
    return this;
  }
  addLink(): this {
    return this;
  }
  addLinks(): this {
    return this;
  }
  setStatus(): this {
    return this;
  }
  updateName(): this {
    return this;
  }
  end(): void {}
  isRecording(): boolean {
    return true;
  }
  recordException(): void {}
}

/** A context manager that follows async calls, as an application's tracing set-up registers. */
export function enableContext(): void {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
}

/** `fn` run with `span` active, as an application's own span around its agent turn. */
export function inSpan<T>(span: Span, fn: () => Promise<T>): Promise<T> {
  return context.with(trace.setSpan(context.active(), span), fn);
}
