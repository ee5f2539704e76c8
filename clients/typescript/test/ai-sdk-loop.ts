/** A Vercel AI SDK agent loop on a pinned session, run by tests/test_real_loops_adapters.py
 * against a live registry and the provider stand-in: QUESTIONS user questions, each answered by
 * `generateText` with the pinned tools until the model stops calling them. Prints one JSON line:
 * each answer, the tool calls run, the turn calls made. */

import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs } from "ai";
import type { ModelMessage } from "ai";

import { registryFetch, registryTools } from "../src/ai-sdk.js";
import { Registry } from "../src/index.js";

const env = (name: string): string => process.env[name] ?? "";
const registry = new Registry(env("REGISTRY_URL"), env("AGENT_KEY"));
const session = await registry.startSession(env("BUNDLE") || "loops");
const ran: string[] = [];
const answers: string[] = [];
try {
  const fetch = registryFetch(session);
  const model =
    env("FORMAT") === "anthropic"
      ? createAnthropic({ baseURL: `${env("PROVIDER_URL")}/v1`, apiKey: "test", fetch })("claude-sonnet-4-6")
      : createOpenAI({ baseURL: `${env("PROVIDER_URL")}/v1`, apiKey: "test", fetch }).chat("gpt-5");
  const tools = await registryTools(session, {
    process_refund: async ({ order_id }) => {
      ran.push(String(order_id));
      return `refunded ${order_id}`;
    },
  });
  const messages: ModelMessage[] = [];
  for (let q = 0; q < Number(env("QUESTIONS") || "1"); q++) {
    messages.push({ role: "user", content: `Question ${q}: refund my order, please.` });
    const result = await generateText({ model, tools, messages, stopWhen: stepCountIs(10) });
    messages.push(...result.response.messages);
    answers.push(result.text);
  }
  console.log(JSON.stringify({ answers, ran, turns: fetch.turns.length }));
  await session.end("resolved", { reason: "answered" });
} finally {
  await session.end();
}
