/** Hand a render to the official SDKs (`@anthropic-ai/sdk`, `openai`) without copying fields
 * by hand. Pure functions with no import of either SDK: the objects they return have the
 * shape of `client.messages.create(...)` / `client.chat.completions.create(...)` params.
 *
 * The rules are those of docs/rendering.md: the prefix (tools, then system) goes unchanged so
 * that the provider's prompt cache holds; the volatile tail is appended to the newest user
 * message (or sent as one more user message when the last message is not the user's). */

import type { RenderResult } from "./registry.js";

type Json = Record<string, unknown>;

/** A tool's input as a JSON Schema object (the registry's tools are Anthropic's shape). */
export interface ToolInputSchema {
  type: "object";
  [key: string]: unknown;
}

/** A tool as the registry serves it in a prefix: name, description, input_schema. */
export interface RegistryTool {
  name: string;
  description?: string;
  input_schema: ToolInputSchema;
  [key: string]: unknown;
}

/** A text block or part: what the helpers append the tail as. */
export interface TextBlock {
  type: "text";
  text: string;
}

// The types below take the caller's message type `M` (for example `Anthropic.MessageParam` or
// `OpenAI.ChatCompletionMessageParam`, imported by the caller from the SDK it uses) and keep it,
// so the params go to `create(...)` as they are: this package imports neither SDK, not even
// their types, and its declarations need neither installed.

/** An Anthropic message: the shape `messages.create` takes (`Anthropic.MessageParam`). */
export interface AnthropicMessage {
  role: string;
  content: string | readonly object[];
}

/** The blocks of a content (the elements of its list form). */
type BlockOf<C> = Exclude<C, string | null | undefined> extends readonly (infer B)[] ? B : never;
/** The content blocks a user message of `M` may hold (`M` a union by role, or one shape whose
 * role may be "user"). */
type UserBlockOf<M> = M extends { role: infer R; content: infer C } ? ("user" extends R ? BlockOf<C> : never) : never;

export interface AnthropicParams<M extends AnthropicMessage = AnthropicMessage> {
  model: string;
  max_tokens: number;
  system: { type: "text"; text: string; cache_control: { type: "ephemeral" } }[];
  tools: RegistryTool[];
  /** The caller's messages; the newest user one with the tail appended as a text block. */
  messages: (M | { role: "user"; content: string | (UserBlockOf<M> | TextBlock)[] })[];
}

/** Params for `anthropic.messages.create(...)`: the tools as the registry serves them (its
 * tool shape is Anthropic's: name, description, input_schema), the system text as one block
 * with a cache breakpoint, so tools + system are read from the cache on every later turn. */
export function anthropicRequest<M extends AnthropicMessage>(
  rendered: RenderResult,
  messages: readonly M[],
  options: { model: string; maxTokens: number },
): AnthropicParams<M> {
  const out: AnthropicParams<M>["messages"] = messages.map((m) => ({ ...m }));
  const last = out[out.length - 1];
  if (rendered.tail) {
    if (last?.role === "user") {
      const blocks = typeof last.content === "string" ? [{ type: "text" as const, text: last.content }] : [...last.content];
      out[out.length - 1] = { ...last, role: "user", content: [...(blocks as UserBlockOf<M>[]), { type: "text", text: rendered.tail }] };
    } else {
      out.push({ role: "user", content: rendered.tail });
    }
  }
  return {
    model: options.model,
    max_tokens: options.maxTokens,
    system: [{ type: "text", text: rendered.prefix.system, cache_control: { type: "ephemeral" } }],
    tools: rendered.prefix.tools as RegistryTool[],
    messages: out,
  };
}

/** An OpenAI Chat message: the shape `chat.completions.create` takes
 * (`OpenAI.ChatCompletionMessageParam`). */
export interface OpenAIMessage {
  role: string;
  content?: string | readonly object[] | null;
}

export interface OpenAIParams<M extends OpenAIMessage = OpenAIMessage> {
  model: string;
  /** The system text first, then the caller's messages, the newest user one with the tail. */
  messages: (M | { role: "system"; content: string } | { role: "user"; content: string | (UserBlockOf<M> | TextBlock)[] })[];
  tools?: { type: "function"; function: { name: string; description?: string; parameters: Json } }[];
  prompt_cache_key: string;
}

/** Params for `openai.chat.completions.create(...)`: the system text first, each tool as a
 * function (input_schema as parameters), and `prompt_cache_key` = `prefix_sha256`, so turns
 * with the same prefix land on the same cache. */
export function openaiRequest<M extends OpenAIMessage>(
  rendered: RenderResult,
  messages: readonly M[],
  options: { model: string },
): OpenAIParams<M> {
  const out: OpenAIParams<M>["messages"] = [{ role: "system", content: rendered.prefix.system }, ...messages.map((m) => ({ ...m }))];
  const last = out[out.length - 1];
  if (rendered.tail) {
    if (last.role === "user" && typeof last.content === "string") {
      out[out.length - 1] = { ...last, role: "user", content: `${last.content}\n\n${rendered.tail}` };
    } else if (last.role === "user" && Array.isArray(last.content)) {
      out[out.length - 1] = { ...last, role: "user", content: [...(last.content as UserBlockOf<M>[]), { type: "text", text: rendered.tail }] };
    } else {
      out.push({ role: "user", content: rendered.tail });
    }
  }
  const tools = (rendered.prefix.tools as RegistryTool[]).map((tool) => ({
    type: "function" as const,
    function: {
      name: String(tool["name"]),
      ...(tool["description"] !== undefined ? { description: String(tool["description"]) } : {}),
      parameters: (tool["input_schema"] as Json | undefined) ?? { type: "object", properties: {} },
    },
  }));
  return { model: options.model, messages: out, ...(tools.length ? { tools } : {}), prompt_cache_key: rendered.prefix_sha256 };
}
