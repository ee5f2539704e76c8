/** One step of an agent loop with an official SDK: the turn call, the request sent with the
 * SDK's `create`, the reply appended in the format's shape (the Python client's `session.step`).
 *
 * The SDK's call is passed as a function, `(body) => anthropic.messages.create(body)`, so this
 * package imports neither SDK (not even its types) and the SDK picks its own overload: the
 * reply is typed as the SDK types it. */
function answered(calls, results) {
    const missing = calls.filter((c) => !(c.id in results)).map((c) => c.id);
    if (missing.length)
        throw new TypeError(`No result for the tool call(s) ${missing.join(", ")}; each call needs one.`);
    return calls.map((c) => c.id);
}
function parsed(raw) {
    if (raw !== null && typeof raw === "object")
        return raw;
    try {
        const value = JSON.parse(typeof raw === "string" && raw ? raw : "{}");
        return value !== null && typeof value === "object" ? value : { _raw: raw };
    }
    catch {
        return { _raw: raw }; // the model's own text: the tool can refuse it, the loop goes on
    }
}
/** A step with `@anthropic-ai/sdk`: `stepAnthropic(session, (body) => anthropic.messages.create(body), messages)`. */
export async function stepAnthropic(session, create, messages, options = {}) {
    const turn = await session.turn(messages, { ...options, format: "anthropic" });
    const reply = await create(turn.request);
    const blocks = reply.content;
    const toolCalls = blocks
        .filter((b) => b.type === "tool_use")
        .map((b) => ({ id: String(b.id), name: String(b.name), arguments: parsed(b.input) }));
    // The reply as an assistant message of the caller's type (the SDK's MessageParam takes its blocks).
    const next = [...turn.messages, { role: "assistant", content: reply.content }];
    return {
        turn,
        reply,
        messages: next,
        toolCalls,
        done: toolCalls.length === 0,
        text: blocks.map((b) => (b.type === "text" ? (b.text ?? "") : "")).join(""),
        withToolResults(results) {
            const content = answered(toolCalls, results).map((id) => ({ type: "tool_result", tool_use_id: id, content: results[id] }));
            return [...next, { role: "user", content }];
        },
    };
}
/** A step with `openai`'s Chat Completions: `stepOpenAIChat(session, (body) => openai.chat.completions.create(body), messages)`. */
export async function stepOpenAIChat(session, create, messages, options = {}) {
    const turn = await session.turn(messages, { ...options, format: "openai-chat" });
    const reply = await create(turn.request);
    const message = reply.choices[0].message;
    const calls = (message.tool_calls ?? []);
    const toolCalls = calls.map((c) => ({ id: String(c.id), name: String(c.function?.name), arguments: parsed(c.function?.arguments) }));
    const next = [...turn.messages, message];
    return {
        turn,
        reply,
        messages: next,
        toolCalls,
        done: toolCalls.length === 0,
        text: message.content ?? "",
        withToolResults(results) {
            const answers = answered(toolCalls, results).map((id) => ({ role: "tool", tool_call_id: id, content: results[id] }));
            return [...next, ...answers];
        },
    };
}
/** A step with `openai`'s Responses API: `stepOpenAIResponses(session, (body) => openai.responses.create(body), input)`.
 * The reply's messages, reasoning items and calls are kept (a reasoning model needs its
 * reasoning items back). */
export async function stepOpenAIResponses(session, create, input, options = {}) {
    const turn = await session.turn(input, { ...options, format: "openai-responses" });
    const reply = await create(turn.request);
    const items = reply.output;
    const kept = items.filter((i) => i.type === "message" || i.type === "reasoning" || i.type === "function_call");
    const toolCalls = items
        .filter((i) => i.type === "function_call")
        .map((i) => ({ id: String(i.call_id), name: String(i.name), arguments: parsed(i.arguments) }));
    const next = [...turn.messages, ...kept];
    return {
        turn,
        reply,
        messages: next,
        toolCalls,
        done: toolCalls.length === 0,
        text: reply.output_text ?? "",
        withToolResults(results) {
            const outputs = answered(toolCalls, results).map((id) => ({ type: "function_call_output", call_id: id, output: results[id] }));
            return [...next, ...outputs];
        },
    };
}
/** A step with Gemini: `stepGemini(session, (body) => ..., contents)`, where the function sends
 * the REST body (`generateContent`; with `@google/genai`, `ai.models.generateContent({ model:
 * body.model, contents: body.contents, config: { systemInstruction: body.systemInstruction,
 * tools: body.tools, ...body.generationConfig } })`) and returns the response. The reply's
 * content is kept whole (its thought signatures included); each function call is answered by a
 * `functionResponse` with its id and name, `{ result: text }`. */
export async function stepGemini(session, create, contents, options = {}) {
    const turn = await session.turn(contents, { ...options, format: "gemini" });
    const reply = await create(turn.request);
    const content = (reply.candidates?.[0]?.content ?? { role: "model", parts: [] });
    const parts = content.parts ?? [];
    const toolCalls = parts
        .filter((p) => p.functionCall)
        .map((p, k) => ({ id: String(p.functionCall?.id ?? `call_${k}`), name: String(p.functionCall?.name), arguments: parsed(p.functionCall?.args) }));
    const next = [...turn.messages, { role: "model", ...content }];
    return {
        turn,
        reply,
        messages: next,
        toolCalls,
        done: toolCalls.length === 0,
        text: parts.map((p) => (p.text !== undefined && !p.thought ? p.text : "")).join(""),
        withToolResults(results) {
            const names = new Map(toolCalls.map((c) => [c.id, c.name]));
            const answers = answered(toolCalls, results).map((id) => ({ functionResponse: { id, name: names.get(id), response: { result: results[id] } } }));
            return [...next, { role: "user", parts: answers }];
        },
    };
}
/** A step with Bedrock's Converse API: `stepBedrockConverse(session, (body) => client.send(new
 * ConverseCommand(body)), messages)` (`@aws-sdk/client-bedrock-runtime`). The reply's message is
 * kept whole; each `toolUse` is answered by a `toolResult` with its id, `[{ text }]`. */
export async function stepBedrockConverse(session, create, messages, options = {}) {
    const turn = await session.turn(messages, { ...options, format: "bedrock-converse" });
    const reply = await create(turn.request);
    const message = (reply.output?.message ?? { role: "assistant", content: [] });
    const blocks = message.content ?? [];
    const toolCalls = blocks
        .filter((b) => b.toolUse)
        .map((b) => ({ id: String(b.toolUse?.toolUseId), name: String(b.toolUse?.name), arguments: parsed(b.toolUse?.input) }));
    const next = [...turn.messages, message];
    return {
        turn,
        reply,
        messages: next,
        toolCalls,
        done: toolCalls.length === 0,
        text: blocks.map((b) => b.text ?? "").join(""),
        withToolResults(results) {
            const answers = answered(toolCalls, results).map((id) => ({ toolResult: { toolUseId: id, content: [{ text: results[id] }] } }));
            return [...next, { role: "user", content: answers }];
        },
    };
}
