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
const PATHS = [
    ["/chat/completions", "openai-chat"],
    ["/responses", "openai-responses"],
    ["/messages", "anthropic"],
];
const CONVERSATION = { "openai-chat": "messages", "openai-responses": "input", anthropic: "messages" };
// The keys a session pins (as the step helpers refuse to replace them), the model, and the
// spellings of an output limit: at most one is sent, the pinned one when it is set.
const PINNED = ["system", "tools", "instructions", "messages", "input", "prompt_cache_key", "model"];
const LIMITS = ["max_tokens", "max_completion_tokens", "max_output_tokens"];
const SYSTEM_ROLES = ["system", "developer"];
/** The turn-call format of a model call posted to `url`, or null for any other request. */
export function formatOf(url) {
    const path = new URL(url).pathname.replace(/\/+$/, "");
    return PATHS.find(([suffix]) => path.endsWith(suffix))?.[1] ?? null;
}
/** The conversation of a framework's request body, its own system messages left out. */
export function conversationOf(format, body) {
    const found = body[CONVERSATION[format]];
    if (typeof found === "string")
        return [{ role: "user", content: found }]; // a Responses input as one text
    if (!Array.isArray(found))
        throw new TypeError(`The ${format} request has no ${CONVERSATION[format]} list to send through the turn call.`);
    return found.filter((m) => !(m && typeof m === "object" && SYSTEM_ROLES.includes(String(m["role"]))));
}
/** The turn's `request` plus what of the framework's body it does not set. */
export function mergedRequest(request, body) {
    const skip = new Set(PINNED);
    if (LIMITS.some((k) => k in request))
        LIMITS.forEach((k) => skip.add(k));
    if (!Array.isArray(request["tools"]) || !request["tools"].length)
        ["tool_choice", "parallel_tool_calls"].forEach((k) => skip.add(k));
    const kept = Object.fromEntries(Object.entries(body).filter(([k]) => !(k in request) && !skip.has(k)));
    return { ...kept, ...request };
}
/** The tools a provider's reply (its JSON) asked for, by name, in order. */
export function toolNames(format, reply) {
    const names = (items, kind, name) => (Array.isArray(items) ? items : []).filter((i) => kind === "" || i["type"] === kind).map((i) => String(name(i) ?? ""));
    if (format === "anthropic")
        return names(reply["content"], "tool_use", (b) => b["name"]);
    if (format === "openai-responses")
        return names(reply["output"], "function_call", (i) => i["name"]);
    const choices = reply["choices"];
    return names(choices?.[0]?.message?.["tool_calls"], "", (c) => c["function"]?.["name"]);
}
/** A `fetch` whose model calls go through the session's turn call (see the module's notes). */
export function registryFetch(session, options = {}) {
    const send = options.fetch ?? globalThis.fetch.bind(globalThis);
    const turns = [];
    let previous = null;
    const wrapped = async (input, init) => {
        const url = input instanceof Request ? input.url : String(input);
        const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
        const format = method === "POST" ? formatOf(url) : null;
        if (format === null)
            return send(input, init);
        // A model call must not reach the provider unpinned: a body this cannot read is refused.
        if (typeof init?.body !== "string")
            throw new TypeError(`registryFetch: the body of a model call (${url}) must be JSON text.`);
        const body = JSON.parse(init.body);
        const before = previous?.format === format ? previous.reply : undefined;
        // The framework's model goes to the turn call only when the version names none (a request
        // needs one; the registry checks it against the version's `model.allowed`).
        const pinned = (await session.bundle()).content["model"]?.["name"];
        const model = !pinned && typeof body["model"] === "string" && body["model"] ? body["model"] : undefined;
        const turn = await session.turn(conversationOf(format, body), {
            format,
            invoked: before && toolNames(format, before),
            response: before,
            signal: init.signal ?? undefined,
            ...(model === undefined ? {} : { model }),
        });
        turns.push(turn);
        const headers = new Headers(init.headers);
        headers.delete("content-length");
        const response = await send(input, { ...init, headers, body: JSON.stringify(mergedRequest(turn.request, body)) });
        previous = null;
        if (response.ok && !body["stream"] && (response.headers.get("content-type") ?? "").includes("json")) {
            const reply = await response.clone().json();
            if (reply && typeof reply === "object")
                previous = { format, reply: reply };
        }
        return response;
    };
    return Object.assign(wrapped, { turns });
}
