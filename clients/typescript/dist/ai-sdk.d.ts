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
import type { ToolSet } from "ai";
import type { PinnedSession } from "./registry.js";
/** The model's file tools over a session's knowledge packs (docs/rendering.md). */
export declare const FILE_TOOLS: readonly ["ls", "glob", "grep", "read"];
type ToolFunction = (input: Record<string, unknown>) => unknown;
/** The pinned tools, each run by `functions[name](input)` (sync or async; its result sent back
 * as text, JSON unless a string), and the knowledge file tools when the version lists packs
 * (served by the session). A pinned tool without a function is a TypeError: the model would
 * call it and get nothing. The schemas here are what the AI SDK knows the tools by; the request
 * carries the pinned ones (`registryFetch`). */
export declare function registryTools(session: PinnedSession, functions: Record<string, ToolFunction>): Promise<ToolSet>;
export { registryFetch } from "./wire.js";
export type { RegistryFetch, RegistryFetchOptions, WireFormat } from "./wire.js";
