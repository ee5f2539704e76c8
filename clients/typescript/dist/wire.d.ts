/** A framework's provider request, laid out again by the turn call, at the `fetch` its SDK uses
 * (the Python client's `promptreg.wire`, which its pydantic-ai adapter sits on).
 *
 * `registryFetch(session)` is a `fetch` for a provider package (`createOpenAI({ fetch })`,
 * `createAnthropic({ fetch })` of the Vercel AI SDK, or an SDK's own `fetch` option): a model call
 * (a POST to `.../chat/completions`, `.../responses` or `.../messages`) has its conversation taken
 * from the body and sent through the turn call in that format, and the turn's `request` is sent
 * instead: the pinned system prompt and tools, this turn's text and skill cards, the compacted
 * conversation, the pinned model settings. Of the framework's body only what the pinned request
 * does not set is kept (`stream`, `tool_choice`, ...), never a pinned key. The reply goes back to
 * the framework untouched; what it asked for is reported as the next turn's `invoked`, and the
 * reply itself (unless streamed) as its `response`. Other requests pass through. */
import type { PinnedSession, TurnResult } from "./registry.js";
type Json = Record<string, unknown>;
export type WireFormat = "openai-chat" | "openai-responses" | "anthropic";
/** The turn-call format of a model call posted to `url`, or null for any other request. */
export declare function formatOf(url: string): WireFormat | null;
/** The conversation of a framework's request body, its own system messages left out. */
export declare function conversationOf(format: WireFormat, body: Json): Json[];
/** The turn's `request` plus what of the framework's body it does not set. */
export declare function mergedRequest(request: Json, body: Json): Json;
/** The tools a provider's reply (its JSON) asked for, by name, in order. */
export declare function toolNames(format: WireFormat, reply: Json): string[];
export interface RegistryFetch {
    (input: string | URL | Request, init?: RequestInit): Promise<Response>;
    /** Each turn call's answer, for the caller's inspection. */
    readonly turns: TurnResult<WireFormat, Json>[];
}
export interface RegistryFetchOptions {
    /** The fetch that sends the requests (default the platform's). */
    fetch?: typeof fetch;
}
/** A `fetch` whose model calls go through the session's turn call (see the module's notes). */
export declare function registryFetch(session: PinnedSession, options?: RegistryFetchOptions): RegistryFetch;
export {};
