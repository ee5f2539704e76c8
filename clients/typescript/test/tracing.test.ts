/** Trace context on the wire: what a small local HTTP server receives from the client, with
 * @opentelemetry/api (a dev dependency here, an optional peer for users) and with the hook;
 * and the pinned version's attributes on the caller's span. Needs no registry: the receiver
 * answers for one session (SESSION), and any other with the contract's 404. */

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
import { RecordingSpan, inSpan } from "./otel.js";

const SESSION = "11111111-2222-3333-4444-555555555555";
const HASH = "a".repeat(64);
const INFO = { id: SESSION, bundle: "refunds", version: 3, content_hash: HASH, label: "production", status: "active" };
const TURN = {
  turn: 1,
  version: 3,
  content_hash: HASH,
  prefix_sha256: "b".repeat(64),
  prefix: { system: "You handle refunds.", tools: [] },
  tail: "",
  notices: [],
  skills: { resident: [], routed: [], session: [], demoted: [] },
  messages: [],
};

const received: IncomingHttpHeaders[] = [];
const server = createServer((request, response) => {
  received.push(request.headers);
  const path = request.url ?? "";
  const prefix = `/api/v1/sessions/${SESSION}/`;
  if (path.startsWith(prefix)) {
    const tail = path.slice(prefix.length);
    const body = tail === "turn/" ? TURN : tail === "" || tail === "heartbeat/" || tail === "end/" ? INFO : {};
    response.writeHead(200, { "Content-Type": "application/json" });
    response.end(JSON.stringify(body));
    return;
  }
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

const PINNED = {
  "gen_ai.prompt.name": "refunds",
  "gen_ai.prompt.version": 3,
  "registry.content_hash": HASH,
  "registry.session.id": SESSION,
};

test("every session call sets the pinned version on the caller's span, as the Python client does", async () => {
  const registry = new Registry(url, "key");
  const restored = new RecordingSpan();
  const session = await inSpan(restored, () => registry.session(SESSION));
  assert.deepEqual(restored.attributes, PINNED);
  const messages = [{ role: "user", content: "refund my order" }];
  const calls: [string, () => Promise<unknown>][] = [
    ["heartbeat", () => session.heartbeat()],
    ["render", () => session.render()],
    ["turn", () => session.turn(messages)],
    ["route", () => session.route(messages)],
    ["reportTurn", () => session.reportTurn(1, [])],
    ["compact", () => session.compact(messages)],
  ];
  for (const [name, call] of calls) {
    const span = new RecordingSpan();
    await inSpan(span, call);
    assert.deepEqual(span.attributes, PINNED, name);
  }
  // The span is the caller's, also after the call: an LLM call made in it carries the pin.
  const turnSpan = new RecordingSpan();
  await inSpan(turnSpan, async () => {
    await session.turn(messages);
    assert.equal(trace.getActiveSpan(), turnSpan);
  });
  assert.equal(turnSpan.attributes["gen_ai.prompt.version"], 3);
  // Ending is not a session call that an LLM call follows (nor in the Python client).
  const ending = new RecordingSpan();
  await inSpan(ending, () => session.end());
  assert.deepEqual(ending.attributes, {});
});

test("no active span, or one that does not record: nothing is set and the call works", async () => {
  const registry = new Registry(url, "key");
  const session = await registry.session(SESSION);
  const idle = trace.wrapSpanContext({ traceId: TRACE, spanId: SPAN, traceFlags: 0 });
  assert.equal(idle.isRecording(), false);
  const rendered = await context.with(trace.setSpan(context.active(), idle), () => session.render());
  assert.deepEqual(rendered, {});
  assert.deepEqual(await session.heartbeat(), INFO);
});

test("the traceHeaders hook replaces only the headers: the attributes still go on the active span", async () => {
  const registry = new Registry(url, "key", { traceHeaders: () => ({}) });
  const span = new RecordingSpan();
  await inSpan(span, async () => {
    const session = await registry.session(SESSION);
    await session.render();
  });
  assert.deepEqual(span.attributes, PINNED);
  assert.equal(received[received.length - 1]["traceparent"], undefined);
});
