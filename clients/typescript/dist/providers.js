/** Hand a render to the official SDKs (`@anthropic-ai/sdk`, `openai`) without copying fields
 * by hand. Pure functions with no import of either SDK: the objects they return have the
 * shape of `client.messages.create(...)` / `client.chat.completions.create(...)` params.
 *
 * The rules are those of docs/rendering.md: the prefix (tools, then system) goes unchanged so
 * that the provider's prompt cache holds; the volatile tail is appended to the newest user
 * message (or sent as one more user message when the last message is not the user's). */
/** Params for `anthropic.messages.create(...)`: the tools as the registry serves them (its
 * tool shape is Anthropic's: name, description, input_schema), the system text as one block
 * with a cache breakpoint, so tools + system are read from the cache on every later turn. */
export function anthropicRequest(rendered, messages, options) {
    const out = messages.map((m) => ({ ...m }));
    const last = out[out.length - 1];
    if (rendered.tail) {
        if (last?.role === "user") {
            const blocks = typeof last.content === "string" ? [{ type: "text", text: last.content }] : [...last.content];
            out[out.length - 1] = { ...last, role: "user", content: [...blocks, { type: "text", text: rendered.tail }] };
        }
        else {
            out.push({ role: "user", content: rendered.tail });
        }
    }
    return {
        model: options.model,
        max_tokens: options.maxTokens,
        system: [{ type: "text", text: rendered.prefix.system, cache_control: { type: "ephemeral" } }],
        tools: rendered.prefix.tools,
        messages: out,
    };
}
/** Params for `openai.chat.completions.create(...)`: the system text first, each tool as a
 * function (input_schema as parameters), and `prompt_cache_key` = `prefix_sha256`, so turns
 * with the same prefix land on the same cache. */
export function openaiRequest(rendered, messages, options) {
    const out = [{ role: "system", content: rendered.prefix.system }, ...messages.map((m) => ({ ...m }))];
    const last = out[out.length - 1];
    if (rendered.tail) {
        if (last.role === "user" && typeof last.content === "string") {
            out[out.length - 1] = { ...last, role: "user", content: `${last.content}\n\n${rendered.tail}` };
        }
        else if (last.role === "user" && Array.isArray(last.content)) {
            out[out.length - 1] = { ...last, role: "user", content: [...last.content, { type: "text", text: rendered.tail }] };
        }
        else {
            out.push({ role: "user", content: rendered.tail });
        }
    }
    const tools = rendered.prefix.tools.map((tool) => ({
        type: "function",
        function: {
            name: String(tool["name"]),
            ...(tool["description"] !== undefined ? { description: String(tool["description"]) } : {}),
            parameters: tool["input_schema"] ?? { type: "object", properties: {} },
        },
    }));
    return { model: options.model, messages: out, ...(tools.length ? { tools } : {}), prompt_cache_key: rendered.prefix_sha256 };
}
