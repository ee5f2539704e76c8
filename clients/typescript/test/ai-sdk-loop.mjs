// A Vercel AI SDK agent loop on a pinned session, run by tests/turns/test_real_loops.py against a live
// registry and the provider stand-in, on the committed dist/ (what a user installs; no build):
// QUESTIONS user questions, each answered by `generateText` with the pinned tools until the model
// stops calling them. Prints one JSON line: the session, each answer, the tool calls run, the
// turn calls made. (docs/client.md's example of the same is type-checked by
// tests/client/test_typescript_client.py.)

import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs } from "ai";

import { registryFetch, registryTools } from "../dist/ai-sdk.js";
import { Registry } from "../dist/index.js";

const env = (name) => process.env[name] ?? "";
const registry = new Registry(env("REGISTRY_URL"), env("AGENT_KEY"));
const session = await registry.startSession("loops");
const ran = [];
const answers = [];
try {
  const fetch = registryFetch(session);
  const options = { baseURL: `${env("PROVIDER_URL")}/v1`, apiKey: "test", fetch };
  const models = {
    anthropic: () => createAnthropic(options)("claude-sonnet-4-6"),
    "openai-chat": () => createOpenAI(options).chat("gpt-6.1-sol"),
    "openai-responses": () => createOpenAI(options).responses("gpt-6.1-sol"),
  };
  const model = models[env("FORMAT")]();
  const tools = await registryTools(session, {
    process_refund: async ({ order_id }) => {
      ran.push(String(order_id));
      return `refunded ${order_id}`;
    },
  });
  const messages = [];
  for (let q = 0; q < Number(env("QUESTIONS") || "1"); q++) {
    messages.push({ role: "user", content: `Question ${q}: refund my order, please.` });
    // Responses: earlier items sent whole, not as `item_reference`s to the provider's stored copies.
    const providerOptions = { openai: { store: false } };
    const result = await generateText({ model, tools, messages, stopWhen: stepCountIs(10), providerOptions });
    messages.push(...result.response.messages);
    answers.push(result.text);
  }
  console.log(JSON.stringify({ session: session.id, answers, ran, turns: fetch.turns.length }));
  await session.end("resolved", { reason: "answered" });
} finally {
  await session.end();
}
