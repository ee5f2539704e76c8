/** The Vercel AI SDK with a pinned session (`promptreg/ai-sdk`; needs the `ai` package, an
 * optional peer dependency that `import "promptreg"` does not load).
 *
 *     const openai = createOpenAI({ fetch: registryFetch(session) });
 *     const { text } = await generateText({
 *       model: openai.chat("gpt-6.1-sol"), tools: await registryTools(session, { process_refund }),
 *       stopWhen: stepCountIs(10), prompt: "Refund order 7, please.",
 *     });
 *
 * `registryFetch` (./wire.ts) runs the turn call before every model call and sends the pinned
 * request; `registryTools` gives the AI SDK the pinned tools by name, each run by your function,
 * so it runs what the model calls. */

import { jsonSchema } from "ai";
import type { ToolSet } from "ai";

import type { PinnedSession } from "./registry.js";

/** The model's file tools over a session's knowledge packs (docs/rendering.md). */
export const FILE_TOOLS = ["ls", "glob", "grep", "read"] as const;

type ToolFunction = (input: Record<string, unknown>) => unknown;

/** The pinned tools, each run by `functions[name](input)` (sync or async; its result sent back
 * as text, JSON unless a string), and the knowledge file tools when the version lists packs
 * (served by the session). A pinned tool without a function is a TypeError: the model would
 * call it and get nothing. The schemas here are what the AI SDK knows the tools by; the request
 * carries the pinned ones (`registryFetch`). */
export async function registryTools(session: PinnedSession, functions: Record<string, ToolFunction>): Promise<ToolSet> {
  const bundle = await session.bundle();
  const pinned = (bundle.content["tools"] ?? []) as { name: string; description?: string; input_schema: Record<string, unknown> }[];
  const missing = pinned.filter((t) => !(t.name in functions)).map((t) => t.name);
  if (missing.length) throw new TypeError(`No function for the pinned tool(s) ${missing.sort().join(", ")}: pass {name: function}.`);
  const tools: ToolSet = {};
  for (const t of pinned) tools[t.name] = runs(t.description ?? "", t.input_schema, functions[t.name]);
  if (bundle.content["knowledge"]) {
    for (const name of FILE_TOOLS) {
      tools[name] = runs("", { type: "object" }, (input) => session.fileTool(name, input));
    }
  }
  return tools;
}

function runs(description: string, schema: Record<string, unknown>, run: ToolFunction): ToolSet[string] {
  return {
    description,
    inputSchema: jsonSchema<Record<string, unknown>>(schema as Parameters<typeof jsonSchema>[0] & object),
    execute: async (input: Record<string, unknown>) => {
      const result = await run(input);
      return typeof result === "string" ? result : JSON.stringify(result);
    },
  };
}

export { registryFetch } from "./wire.js";
export type { RegistryFetch, RegistryFetchOptions, WireFormat } from "./wire.js";
