/** Trace context on the wire: what a small local HTTP server receives from the client, with
 * @opentelemetry/api (a dev dependency here, an optional peer for users) and with the hook.
 * Needs no registry: the receiver answers every request with the contract's 404. */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";

import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { TraceState, W3CTraceContextPropagator } from "@opentelemetry/core";

const createTraceState = (raw: string) => new TraceState(raw);

import { NotFound, Registry } from "../src/index.js";

const received: IncomingHttpHeaders[] = [];
const server = createServer((request, response) => {
  received.push(request.headers);
  response.writeHead(404, { "Content-Type": "application/json" });
  response.end(JSON.stringify({ error: { code: "not_found", message: "No such session.", details: {} } }));
});
let url = "";

before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
after(() => server.close());

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const SPAN = "b7ad6b7169203331";
const ID = "00000000-0000-0000-0000-000000000000";

async function lastHeaders(registry: Registry): Promise<IncomingHttpHeaders> {
  await assert.rejects(registry.session(ID), NotFound);
  return received[received.length - 1];
}

test("the active span's traceparent and tracestate reach the server", async () => {
  const span = trace.wrapSpanContext({
    traceId: TRACE,
    spanId: SPAN,
    traceFlags: 1,
    traceState: createTraceState("vendor=abc"),
  });
  const registry = new Registry(url, "key");
  const headers = await context.with(trace.setSpan(context.active(), span), () => lastHeaders(registry));
  assert.equal(headers["traceparent"], `00-${TRACE}-${SPAN}-01`);
  assert.equal(headers["tracestate"], "vendor=abc");
});

test("without an active span no trace header is sent", async () => {
  const headers = await lastHeaders(new Registry(url, "key"));
  assert.equal(headers["traceparent"], undefined);
  assert.equal(headers["tracestate"], undefined);
});

test("the hook replaces the lookup, and only the two trace headers are taken from it", async () => {
  const registry = new Registry(url, "key", {
    traceHeaders: () => ({ traceparent: `00-${TRACE}-${SPAN}-00`, tracestate: "vendor=1", authorization: "Bearer stolen" }),
  });
  const headers = await lastHeaders(registry);
  assert.equal(headers["traceparent"], `00-${TRACE}-${SPAN}-00`);
  assert.equal(headers["tracestate"], "vendor=1");
  assert.equal(headers["authorization"], "Bearer key");
});
