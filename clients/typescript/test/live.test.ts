/** The TypeScript client against a real registry server. tests/client/test_typescript_client.py starts
 * the servers, creates the keys and the bundle "refunds" (production -> v1, and an unlabelled
 * v2), and runs this file with node's test runner; tests run in order, on shared data. */

import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import {
  Bundle,
  Conflict,
  IntegrityError,
  InvalidRequest,
  ModelRetired,
  NotAuthenticated,
  NotFound,
  PermissionDenied,
  Registry,
  Retry,
  SessionEnded,
  Throttled,
  Unavailable,
  VersionRevoked,
  anthropicRequest,
  openaiRequest,
  stepAnthropic,
  stepOpenAIChat,
  stepOpenAIResponses,
} from "../src/index.js";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { RecordingSpan, enableContext, inSpan } from "./otel.js";
import { errorFromResponse } from "../src/errors.js";

enableContext(); // as an application with OpenTelemetry set up (see the span test)

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through tests/client/test_typescript_client.py`);
  return value;
}

const URL_ = env("PROMPTREG_URL");
const AGENT = env("PROMPTREG_AGENT_KEY");
const OPS = env("PROMPTREG_OPS_KEY");
const THROTTLED_URL = env("PROMPTREG_THROTTLED_URL");
const THROTTLED_KEY = env("PROMPTREG_THROTTLED_KEY");
const CLOSED_URL = env("PROMPTREG_CLOSED_URL"); // a port nothing listens on
const V1_BODY = env("PROMPTREG_V1_BODY"); // the exact bytes of v1's pinned bundle

const BUNDLE_ROUTE = "api/v1/sessions/<uuid:session_id>/bundle/";

/** A fetch that remembers (method, path, status) of each exchange, and counts attempts. */
function recorder() {
  const seen: [string, string, number][] = [];
  let attempts = 0;
  const impl: typeof fetch = async (input, init) => {
    attempts++;
    const response = await fetch(input, init);
    seen.push([init?.method ?? "GET", new URL(String(input)).pathname, response.status]);
    return response;
  };
  return { seen, impl, attempts: () => attempts };
}

/** Pinned-bundle answers the server counted, by status (its Prometheus counter). */
async function served(): Promise<Record<string, number>> {
  const text = await (await fetch(`${URL_}/metrics`)).text();
  const counts: Record<string, number> = { "200": 0, "304": 0 };
  for (const line of text.split("\n")) {
    if (!line.startsWith("registry_http_requests_total{") || !line.includes(`route="${BUNDLE_ROUTE}"`)) continue;
    const status = /status="(\d+)"/.exec(line)?.[1];
    if (status) counts[status] = (counts[status] ?? 0) + Number(line.trim().split(" ").pop());
  }
  return counts;
}

async function sessionStatus(registry: Registry, id: string): Promise<string> {
  return (await registry.json<{ status: string }>("GET", `/api/v1/sessions/${id}/`)).status;
}

describe("promptreg (TypeScript) against a live registry", () => {
  test("it starts a pinned session and keeps its bundle; one body per session", async () => {
    const wire = recorder();
    const registry = new Registry(URL_, AGENT, { fetch: wire.impl });
    const before = await served();
    let id = "";
    {
      await using session = await registry.startSession("refunds");
      id = session.id;
      assert.deepEqual([session.bundleName, session.version, session.label], ["refunds", 1, "production"]);
      const pinned = await session.bundle();
      assert.equal(new TextDecoder().decode(pinned.raw), V1_BODY); // the exact bytes served
      assert.equal(pinned.contentHash, session.contentHash);
      assert.equal((pinned.tools[0] as { name: string }).name, "process_refund");
      assert.equal(await session.bundle(), pinned); // fetched once, kept for the session's life
      assert.equal(await sessionStatus(registry, id), "active");
    }
    assert.equal(await sessionStatus(registry, id), "ended"); // `await using` ended it
    assert.deepEqual(wire.seen.filter(([, p]) => p.endsWith("/bundle/")).map(([, , s]) => s), [200]);
    const after = await served();
    assert.equal(after["200"] - before["200"], 1);
  });

  test("a second session on the same hash revalidates with a 304, counted on the server", async () => {
    const registry = new Registry(URL_, AGENT);
    const before = await served();
    const first = await registry.startSession("refunds");
    const second = await registry.startSession("refunds");
    assert.equal(await second.bundle(), await first.bundle()); // the same object, by hash
    assert.equal(await first.refresh(), await first.bundle()); // and a refresh costs no body
    const after = await served();
    assert.deepEqual([after["200"] - before["200"], after["304"] - before["304"]], [1, 2]);
    await first.end();
    await second.end();
    await second.end(); // idempotent
  });

  test("await using ends the session on an exception too; then SessionEnded", async () => {
    const registry = new Registry(URL_, AGENT);
    let kept: import("../src/index.js").PinnedSession | undefined;
    await assert.rejects(async () => {
      await using session = await registry.startSession("refunds");
      kept = session;
      throw new RangeError("boom");
    }, RangeError);
    assert.ok(kept?.ended);
    await assert.rejects(kept!.refresh(), SessionEnded);
    await assert.rejects(kept!.heartbeat(), (e: unknown) => e instanceof SessionEnded && e.status === 410);
  });

  test("typed errors, and no retry on other 4xx", async () => {
    const wire = recorder();
    const registry = new Registry(URL_, AGENT, { fetch: wire.impl });
    await assert.rejects(registry.startSession("no-such-bundle"), NotFound);
    assert.equal(wire.attempts(), 1); // a 404 is never retried
    await assert.rejects(
      registry.json("POST", "/api/v1/bundles/", { json: { name: "nope" } }),
      (e: unknown) => e instanceof PermissionDenied && e.status === 403,
    );
    await assert.rejects(new Registry(URL_, "pr_" + "x".repeat(43)).catalog(), NotAuthenticated);
    await assert.rejects(registry.startSession("refunds", { label: "production", version: 1 }), TypeError);
  });

  test("a retried start (same external id) returns the same session", async () => {
    const registry = new Registry(URL_, AGENT);
    const first = await registry.startSession("refunds", { externalId: "conversation-ts-42" });
    const again = await registry.startSession("refunds", { externalId: "conversation-ts-42" });
    assert.equal(again.id, first.id);
    await first.end();
  });

  test("render, route and compact go through the session", async () => {
    const registry = new Registry(URL_, AGENT);
    await using session = await registry.startSession("refunds");
    const rendered = await session.render();
    assert.equal(rendered.content_hash, session.contentHash);
    assert.equal(typeof rendered.prefix_sha256, "string");
    const routed = await session.route([{ role: "user", content: "refund my order" }], { k: 3 });
    assert.equal(typeof routed.turn, "number");
    const compacted = await session.compact([{ role: "user", content: "hi" }]);
    assert.ok(Array.isArray(compacted.messages));
  });

  test("turn() sends the prefix once per session and keeps it by hash", async () => {
    const sent: Record<string, unknown>[] = [];
    const answered: Record<string, unknown>[] = [];
    const impl: typeof fetch = async (input, init) => {
      if (!String(input).endsWith("/turn/")) return fetch(input, init);
      sent.push(JSON.parse(String(init?.body)));
      const response = await fetch(input, init);
      answered.push((await response.clone().json()) as Record<string, unknown>);
      return response;
    };
    const registry = new Registry(URL_, AGENT, { fetch: impl });
    await using session = await registry.startSession("refunds");
    const messages = [{ role: "user", content: "refund my order 7" }];
    const first = await session.turn(messages, { k: 3, format: "anthropic" });
    const second = await session.turn(messages, { invoked: [], format: "anthropic" });
    assert.equal(first.content_hash, session.contentHash);
    assert.ok(!first.prefix_unchanged && second.prefix_unchanged === true);
    assert.deepEqual(second.prefix, first.prefix); // the held prefix, put back into the answer
    // ... and the request's stable part: whole, as if sent in full, with nothing left to apply.
    const [a, b] = [first.request, second.request]; // typed: AnthropicTurnRequest
    assert.deepEqual([b.tools, b.system], [a.tools, a.system]);
    assert.equal(second["request_reuse"], undefined);
    assert.equal(session.prefixReceived, 1);
    assert.equal(sent[0]["prefix_sha256"], undefined);
    assert.equal(sent[1]["prefix_sha256"], first.prefix_sha256);
    assert.equal(second.turn, first.turn + 1);
    // A format asked for the first time on this prefix: no hash sent, so it comes whole.
    const chat = await session.turn(messages, { format: "openai-chat" });
    assert.equal(sent[2]["prefix_sha256"], undefined);
    const again = await session.turn(messages, { format: "openai-chat" });
    assert.equal(sent[3]["prefix_sha256"], first.prefix_sha256);
    assert.deepEqual((again.request as { messages: unknown[] }).messages[0], (chat.request as { messages: unknown[] }).messages[0]);
    // With a format the wire carries the conversation once, in `request`; the client gives it as `messages`.
    assert.ok(answered.every((a) => !("messages" in a)));
    assert.deepEqual([chat.messages, again.messages], [messages, messages]);
    await assert.rejects(session.turn(messages, { format: "claude" as never }), TypeError);
  });

  test("the caller's span carries the pinned version: start, and each turn", async () => {
    const registry = new Registry(URL_, AGENT);
    const started = new RecordingSpan();
    const session = await inSpan(started, () => registry.startSession("refunds"));
    try {
      const pinned = {
        "gen_ai.prompt.name": "refunds",
        "gen_ai.prompt.version": 1,
        "registry.content_hash": session.contentHash,
        "registry.session.id": session.id,
      };
      assert.equal(session.version, 1); // production
      assert.deepEqual(started.attributes, pinned);
      const turn = new RecordingSpan();
      const answer = await inSpan(turn, () => session.turn([{ role: "user", content: "refund my order 8" }]));
      assert.equal(answer.content_hash, turn.attributes["registry.content_hash"]);
      assert.deepEqual(turn.attributes, pinned);
    } finally {
      await session.end();
    }
  });

  test("a render goes to the Anthropic and OpenAI SDK params unchanged", async () => {
    const registry = new Registry(URL_, AGENT);
    await using session = await registry.startSession("refunds");
    const rendered = await session.render();
    assert.ok(rendered.tail.length > 0);
    const history = [{ role: "user" as const, content: "refund order 7" }];
    const anthropic = anthropicRequest(rendered, history, { model: "m", maxTokens: 100 });
    assert.equal(anthropic.system[0].text, rendered.prefix.system);
    assert.deepEqual(anthropic.tools, rendered.prefix.tools); // the registry's tools are Anthropic's shape
    assert.deepEqual(anthropic.messages[0].content, [
      { type: "text", text: "refund order 7" },
      { type: "text", text: rendered.tail },
    ]);
    assert.equal(history[0].content, "refund order 7"); // the caller's messages are not touched
    const openai = openaiRequest(rendered, history, { model: "m" });
    assert.deepEqual(openai.messages[0], { role: "system", content: rendered.prefix.system });
    assert.equal(openai.messages[1].content, `refund order 7\n\n${rendered.tail}`);
    assert.equal(openai.prompt_cache_key, rendered.prefix_sha256);
    const tool = rendered.prefix.tools[0] as { name: string; input_schema: unknown };
    assert.deepEqual(openai.tools?.[0].function.parameters, tool.input_schema);
    assert.equal(openai.tools?.[0].function.name, tool.name);
  });

  test("a step sends each turn's request with the SDK and appends the reply (three formats)", async () => {
    const provider = await receiver();
    try {
      const registry = new Registry(URL_, AGENT);
      await using session = await registry.startSession("refunds");
      const anthropic = new Anthropic({ baseURL: provider.url, apiKey: "test", maxRetries: 0 });
      let step = await stepAnthropic(session, (body) => anthropic.messages.create(body), [{ role: "user", content: "Refund order 7." }] as Anthropic.MessageParam[]);
      assert.deepEqual(step.toolCalls, [{ id: "toolu_01", name: "process_refund", arguments: { order_id: "7" } }]);
      step = await stepAnthropic(session, (body) => anthropic.messages.create(body), step.withToolResults({ toolu_01: "refunded" }));
      assert.ok(step.done && step.text === "Refunded.");

      const openai = new OpenAI({ baseURL: `${provider.url}/v1`, apiKey: "test", maxRetries: 0 });
      const start: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Refund order 7." }];
      let chat = await stepOpenAIChat(session, (body) => openai.chat.completions.create(body), start);
      chat = await stepOpenAIChat(session, (body) => openai.chat.completions.create(body), chat.withToolResults({ call_1: "refunded" }));
      assert.ok(chat.done && chat.text === "Refunded.");

      const input: OpenAI.Responses.ResponseInputItem[] = [{ role: "user", content: "Refund order 7." }];
      let responses = await stepOpenAIResponses(session, (body) => openai.responses.create(body), input);
      assert.deepEqual(responses.toolCalls.map((c) => c.id), ["call_1"]);
      responses = await stepOpenAIResponses(session, (body) => openai.responses.create(body), responses.withToolResults({ call_1: "refunded" }));
      assert.ok(responses.done && responses.text === "Refunded.");

      assert.deepEqual(provider.refused, []);
      const paths = provider.seen.map(([path]) => path);
      assert.deepEqual(paths, ["/v1/messages", "/v1/messages", "/v1/chat/completions", "/v1/chat/completions", "/v1/responses", "/v1/responses"]);
      const [first, second] = [provider.seen[0][1], provider.seen[1][1]];
      assert.deepEqual([second["system"], second["tools"], second["model"]], [first["system"], first["tools"], "m-1"]);
    } finally {
      provider.close();
    }
  });

  test("a revoked version raises VersionRevoked with the labels to start anew on", async () => {
    const registry = new Registry(URL_, AGENT);
    const session = await registry.startSession("refunds", { version: 2 });
    assert.equal(session.version, 2);
    const ops = new Registry(URL_, OPS);
    await ops.json("POST", "/api/v1/bundles/refunds/versions/2/revoke/", { json: { reason: "leaks data" } });
    await assert.rejects(session.refresh(), (e: unknown) => {
      assert.ok(e instanceof VersionRevoked);
      assert.deepEqual(e.labels, { production: 1 });
      assert.equal(e.code, "version_revoked");
      return true;
    });
    await assert.rejects(session.heartbeat(), VersionRevoked);
  });

  test("a turn reports usage or the reply; end takes an outcome, score a named score (evidence)", async () => {
    const registry = new Registry(URL_, AGENT);
    const session = await registry.startSession("refunds");
    const messages = [{ role: "user", content: "Refund order 7." }];
    await session.turn(messages, { usage: { input_tokens: 1200, output_tokens: 80, cache_read_tokens: 1000, latency_ms: 700 } });
    const content = [{ type: "text", text: "Done." }];
    const reply = { id: "msg_1", type: "message", role: "assistant", model: "m-1", content, stop_reason: "end_turn", usage: { input_tokens: 10, output_tokens: 5 } };
    await session.turn(messages, { format: "anthropic", response: reply });
    await assert.rejects(session.turn(messages, { usage: { input_tokens: -1 } }), (e: unknown) => {
      assert.ok(e instanceof InvalidRequest && Object.keys(e.details).some((k) => k.startsWith("usage")), String(e));
      return true;
    });
    assert.equal((await session.score("thumbs", 1, { source: "user", id: "t-1" }))["id"], "t-1");
    await session.end("resolved", { reason: "refunded" });
    assert.equal(session.ended, true);
    // The outcome was recorded: the same session ended again with another is refused.
    await assert.rejects((await registry.session(session.id)).end("failed"), Conflict);
    await session.score("judge.helpful", 0.5, { source: "judge" }); // after the end, within its window
  });

  test("throttled carries retryAfter and is not waited past the deadline", async () => {
    const wire = recorder();
    const registry = new Registry(THROTTLED_URL, THROTTLED_KEY, { fetch: wire.impl, retry: { deadline: 2 } });
    for (let i = 0; i < 3; i++) await registry.catalog();
    await assert.rejects(registry.catalog(), (e: unknown) => {
      assert.ok(e instanceof Throttled);
      assert.ok(e.retryAfter !== null && e.retryAfter > 2, `retryAfter ${e.retryAfter}`);
      return true;
    });
    assert.deepEqual(wire.seen.map(([, , s]) => s), [200, 200, 200, 429]);
  });

  test("it gives up at the deadline with Unavailable, having retried", async () => {
    const wire = recorder();
    const registry = new Registry(CLOSED_URL, AGENT, { fetch: wire.impl, retry: { deadline: 1 } });
    const began = performance.now();
    await assert.rejects(registry.catalog(), Unavailable);
    assert.ok(wire.attempts() >= 2, `attempts ${wire.attempts()}`);
    assert.ok(performance.now() - began < 3000); // slack for a loaded machine
  });

  test("an AbortSignal stops a call at once, retries and waits included", async () => {
    const wire = recorder();
    const registry = new Registry(CLOSED_URL, AGENT, { fetch: wire.impl, retry: { deadline: 60 } });
    const controller = new AbortController();
    const began = performance.now();
    setTimeout(() => controller.abort(new Error("caller gave up")), 300);
    await assert.rejects(registry.catalog({ signal: controller.signal }), /caller gave up/);
    assert.ok(performance.now() - began < 2000);
    const attempts = wire.attempts();
    await assert.rejects(registry.catalog({ signal: AbortSignal.abort(new Error("already")) }), /already/);
    assert.equal(wire.attempts(), attempts); // nothing was sent
  });

  test("keep-alive holds the lease and stops at the end", async () => {
    const registry = new Registry(URL_, AGENT);
    const kept = await registry.startSession("refunds", { ttlSeconds: 3, keepAlive: true });
    const lapsed = await registry.startSession("refunds", { ttlSeconds: 3 });
    assert.ok(kept.keepingAlive && Math.abs(kept.leaseSeconds - 3) < 0.5);
    await new Promise((resolve) => setTimeout(resolve, 4500)); // a heartbeat every second
    assert.equal(await sessionStatus(registry, kept.id), "active");
    assert.equal(await sessionStatus(registry, lapsed.id), "expired");
    assert.equal(kept.keepAliveError, null);
    await kept.end();
    assert.ok(!kept.keepingAlive);
    assert.equal(await sessionStatus(registry, kept.id), "ended");
  });

  test("the offline snapshot is used only when unreachable, and never silently", async () => {
    const dir = await mkdtemp(join(tmpdir(), "promptreg-ts-"));
    const online = new Registry(URL_, AGENT, { snapshotDir: dir });
    const started = await online.startSession("refunds");
    await started.end();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on("warning", onWarning);
    try {
      const offline = new Registry(CLOSED_URL, AGENT, { snapshotDir: dir, retry: { deadline: 0.5 } });
      const span = new RecordingSpan();
      const session = await inSpan(span, () => offline.startSession("refunds"));
      assert.ok(session.offline);
      // Offline there is no session id; the pin is still on the caller's span.
      assert.deepEqual(span.attributes, {
        "gen_ai.prompt.name": "refunds",
        "gen_ai.prompt.version": 1,
        "registry.content_hash": session.contentHash,
      });
      assert.equal(session.version, 1);
      assert.equal(new TextDecoder().decode((await session.bundle()).raw), V1_BODY);
      await session.heartbeat(); // nothing to renew
      await assert.rejects(session.render(), Unavailable);
      await session.end();
      await assert.rejects(offline.startSession("refunds", { label: "staging" }), Unavailable); // no snapshot
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(warnings.length, 1);
      assert.match(warnings[0], /OFFLINE/);
      // A refusal is never an outage: no fallback.
      await assert.rejects(new Registry(URL_, AGENT, { snapshotDir: dir }).startSession("no-such-bundle"), NotFound);
    } finally {
      process.off("warning", onWarning);
    }
  });
});

describe("the pieces without a server", () => {
  test("410 model_retired is a ModelRetired (a VersionRevoked) saying the model, date and replacement", async () => {
    const details = { model: "gpt-5", retires_at: "2026-12-11", replacement: "gpt-6.1-sol", labels: { production: 3 } };
    const body = JSON.stringify({ error: { code: "model_retired", message: "The model gpt-5 has retired.", details } });
    const error = await errorFromResponse(new Response(body, { status: 410 }));
    assert.ok(error instanceof ModelRetired && error instanceof VersionRevoked);
    assert.deepEqual([error.model, error.retiresAt, error.replacement, error.labels], ["gpt-5", "2026-12-11", "gpt-6.1-sol", { production: 3 }]);
    const revoked = await errorFromResponse(new Response(JSON.stringify({ error: { code: "version_revoked", details: {} } }), { status: 410 }));
    assert.ok(revoked instanceof VersionRevoked && !(revoked instanceof ModelRetired));
  });

  test("a body that does not hash to its content_hash is refused", async () => {
    const tampered = V1_BODY.replace("process_refund", "process_refunX");
    await assert.rejects(Bundle.fromBody(new TextEncoder().encode(tampered)), IntegrityError);
    const good = await Bundle.fromBody(new TextEncoder().encode(V1_BODY));
    assert.equal(good.version, 1);
  });

  test("the retry schedule: full jitter, Retry-After as a floor, the deadline as a ceiling", () => {
    const retry = new Retry({ deadline: 10, initial: 0.2, maximum: 5 });
    assert.equal(retry.wait(new NotFound("x", { status: 404 }), 0, 0), null);
    assert.equal(retry.wait(new Unavailable("x"), 3, 0, () => 1), 1.6);
    assert.equal(retry.wait(new Unavailable("x"), 10, 0, () => 1), 5);
    assert.equal(retry.wait(new Throttled("x", { retryAfter: 4 }), 0, 0, () => 0.5), 4);
    assert.equal(retry.wait(new Throttled("x", { retryAfter: 4 }), 0, 7, () => 0.5), null);
  });
});

/** A MINIMAL LOCAL RECEIVER for the step test (the provider stand-in with each provider's rules
 * is devtools/provider_standin.py, another branch): Anthropic's /v1/messages, OpenAI's
 * /v1/chat/completions and /v1/responses; a tool call first, then text once a result came back;
 * every result must answer a call of the conversation. */
async function receiver() {
  const seen: [string, Record<string, any>][] = [];
  const refused: string[] = [];
  const server = createServer((request, response) => {
    let raw = "";
    request.on("data", (chunk) => (raw += chunk));
    request.on("end", () => {
      const body = JSON.parse(raw) as Record<string, any>;
      const path = request.url ?? "";
      seen.push([path, body]);
      let answer: Record<string, unknown>;
      const call = { name: "process_refund", arguments: '{"order_id": "7"}' };
      if (path === "/v1/messages") {
        const blocks = body.messages.flatMap((m: any) => (Array.isArray(m.content) ? m.content : []));
        const uses = new Set(blocks.filter((b: any) => b.type === "tool_use").map((b: any) => b.id));
        const results = blocks.filter((b: any) => b.type === "tool_result");
        if (results.some((r: any) => !uses.has(r.tool_use_id))) refused.push("a tool_result answers no tool_use");
        const content = results.length
          ? [{ type: "text", text: "Refunded." }]
          : [{ type: "tool_use", id: "toolu_01", name: "process_refund", input: { order_id: "7" } }];
        answer = { id: "msg_1", type: "message", role: "assistant", model: body.model, content, stop_reason: results.length ? "end_turn" : "tool_use", stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } };
      } else if (path === "/v1/chat/completions") {
        const calls = new Set(body.messages.flatMap((m: any) => (m.tool_calls ?? []).map((c: any) => c.id)));
        const results = body.messages.filter((m: any) => m.role === "tool");
        if (results.some((r: any) => !calls.has(r.tool_call_id))) refused.push("a tool message answers no call");
        const message = results.length ? { role: "assistant", content: "Refunded." } : { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: call }] };
        answer = { id: "c1", object: "chat.completion", created: 0, model: body.model, choices: [{ index: 0, message, finish_reason: results.length ? "stop" : "tool_calls" }] };
      } else {
        const calls = new Set(body.input.filter((i: any) => i.type === "function_call").map((i: any) => i.call_id));
        const results = body.input.filter((i: any) => i.type === "function_call_output");
        if (results.some((r: any) => !calls.has(r.call_id))) refused.push(`No tool call found for function call output`);
        const output = results.length
          ? [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Refunded.", annotations: [] }] }]
          : [{ type: "function_call", id: "fc_1", call_id: "call_1", status: "completed", ...call }];
        answer = { id: "resp_1", object: "response", created_at: 0, model: body.model, status: "completed", output, output_text: results.length ? "Refunded." : "", parallel_tool_calls: true, tool_choice: "auto", tools: [] };
      }
      if (!body.model) refused.push("model is required");
      const data = JSON.stringify(answer);
      response.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
      response.end(data);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen, refused, close: () => server.close() };
}
