/** `Registry` and the `PinnedSession` it starts: the same promise as the Python client. */
import { API, Bundle, BundleCache, Retry, USER_AGENT, attemptSignal, newExternalId, sessionPath, sleep } from "./core.js";
import { IntegrityError, RegistryError, Unavailable, errorFromResponse } from "./errors.js";
import { Snapshots, warnOffline } from "./snapshots.js";
import { annotate, traceHeaders } from "./tracing.js";
export const TURN_FORMATS = ["anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini"];
/** A request the registry sent without its stable part, completed from `held` (the last complete
 * request of the same format and prefix) as `reuse` says. */
export function wholeRequest(partial, held, reuse) {
    const whole = {};
    for (const key of Object.keys(held))
        if (reuse.keys.includes(key))
            whole[key] = held[key];
    Object.assign(whole, partial);
    const lead = held[reuse.list]?.slice(0, reuse.messages) ?? [];
    whole[reuse.list] = [...lead, ...(partial[reuse.list] ?? [])];
    return whole;
}
// Where a request holds the conversation: its list, and how many entries lead it (openai-chat's
// system message); the per-turn text follows it (docs/api.md, the turn call).
const REQUEST_CONVERSATION = {
    anthropic: ["messages", 0],
    "openai-chat": ["messages", 1],
    "openai-responses": ["input", 0],
    "bedrock-converse": ["messages", 0],
    gemini: ["contents", 0],
};
/** The compacted conversation a complete `request` carries (a turn answered with `format` leaves
 * `messages` out): its list less the leading entries and less the per-turn text, which is the
 * last entry's last block (`content` or `parts`), or that entry whole when it holds only the text. */
export function turnConversation(format, request, turnText) {
    const [key, lead] = REQUEST_CONVERSATION[format];
    const entries = (request[key] ?? []).slice(lead);
    const last = entries[entries.length - 1];
    if (!turnText || last === undefined || last === null || typeof last !== "object")
        return entries;
    const field = format === "gemini" ? "parts" : "content";
    const held = last[field];
    if (held === turnText)
        return entries.slice(0, -1);
    if (Array.isArray(held) && held.length) {
        const block = held[held.length - 1];
        if (block !== null && typeof block === "object" && block["text"] === turnText) {
            const rest = held.slice(0, -1);
            const kept = rest.length ? [...entries.slice(0, -1), { ...last, [field]: rest }] : entries.slice(0, -1);
            return kept;
        }
    }
    return entries;
}
/** A connection to one registry with one API key. `baseUrl` is the service root
 * (`http://127.0.0.1:8000`). */
export class Registry {
    url;
    retry;
    bundles = new BundleCache();
    snapshots;
    apiKey;
    fetchImpl;
    onRetry;
    traceHook;
    constructor(baseUrl, apiKey, options = {}) {
        this.url = baseUrl.replace(/\/+$/, "");
        this.apiKey = apiKey;
        this.retry = new Retry(options.retry);
        this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
        this.snapshots = options.snapshotDir ? new Snapshots(options.snapshotDir) : null;
        this.onRetry = options.onRetry;
        this.traceHook = options.traceHeaders;
    }
    /** Send one request, retrying as `retry` says; a 2xx or 304 is returned, any other answer
     * throws its typed error. An aborted signal rejects at once with the signal's reason. */
    async request(method, path, options = {}) {
        const retry = options.deadline === undefined ? this.retry : this.retry.with({ deadline: options.deadline });
        const began = performance.now();
        const elapsed = () => (performance.now() - began) / 1000;
        let url = path.startsWith("http") ? path : `${this.url}${path}`;
        if (options.query)
            url += `?${new URLSearchParams(Object.entries(options.query).map(([k, v]) => [k, String(v)]))}`;
        const headers = {
            Authorization: `Bearer ${this.apiKey}`,
            "User-Agent": USER_AGENT,
            Accept: "application/json",
            ...(await traceHeaders(this.traceHook)),
            ...options.headers,
        };
        let body;
        if (options.json !== undefined) {
            body = JSON.stringify(options.json);
            headers["Content-Type"] = "application/json";
        }
        for (let attempt = 0;; attempt++) {
            options.signal?.throwIfAborted();
            const guard = attemptSignal(retry.attemptTimeout(elapsed()), options.signal);
            let error;
            try {
                const response = await this.fetchImpl(url, { method, headers, body, signal: guard.signal });
                if (response.status < 400)
                    return response;
                error = await errorFromResponse(response);
            }
            catch (exc) {
                if (options.signal?.aborted)
                    throw options.signal.reason;
                if (exc instanceof RegistryError)
                    throw exc;
                const why = guard.timedOut() ? "timed out" : describe(exc);
                error = new Unavailable(`Cannot reach the registry at ${this.url}: ${why}`);
            }
            finally {
                guard.done();
            }
            const wait = retry.wait(error, attempt, elapsed());
            if (wait === null)
                throw error;
            this.onRetry?.({ method, path, error, wait });
            await sleep(wait, options.signal);
        }
    }
    async json(method, path, options = {}) {
        const response = await this.request(method, path, options);
        return (await response.json());
    }
    /** Pin a session to what `label` (default production) targets now, or to `version`, and
     * fetch its bundle. `await using session = await registry.startSession(...)` ends it when the
     * block is left, also on an exception. */
    async startSession(bundle, options = {}) {
        if (options.label !== undefined && options.version !== undefined) {
            throw new TypeError("Give label or version, not both.");
        }
        const body = { bundle, external_id: options.externalId ?? newExternalId() };
        if (options.label !== undefined)
            body["label"] = options.label;
        if (options.version !== undefined)
            body["version"] = options.version;
        if (options.routingKey !== undefined)
            body["routing_key"] = options.routingKey;
        if (options.variables !== undefined)
            body["variables"] = options.variables;
        if (options.ttlSeconds !== undefined)
            body["ttl_seconds"] = options.ttlSeconds;
        const call = { signal: options.signal, deadline: options.deadline };
        let session;
        let pinned;
        try {
            const info = await this.json("POST", `${API}/sessions/`, { ...call, json: body });
            session = new PinnedSession(this, info);
            await session.annotateSpan(); // the span that started the session
            pinned = await session.bundle(call);
        }
        catch (exc) {
            const offline = exc instanceof Unavailable && this.snapshots ? await this.snapshots.load(bundle, options.label, options.version) : null;
            if (offline === null)
                throw exc;
            warnOffline(offline, options.label, exc);
            const fromSnapshot = PinnedSession.offlineFrom(this, offline, options.label ?? null);
            await fromSnapshot.annotateSpan();
            return fromSnapshot;
        }
        if (this.snapshots)
            await this.snapshots.save(pinned, options.label, options.version);
        if (options.keepAlive)
            session.keepAlive();
        return session;
    }
    /** An existing session (e.g. one an earlier process started), by id. */
    async session(id, options = {}) {
        const session = new PinnedSession(this, await this.json("GET", sessionPath(id), options));
        await session.annotateSpan(); // the span that restored the session
        return session;
    }
    /** What this key may start sessions on, every page. */
    async catalog(options = {}) {
        const results = [];
        let next = `${API}/catalog/`;
        while (next) {
            const page = await this.json("GET", next, options);
            results.push(...page.results);
            next = page.next;
        }
        return results;
    }
}
function describe(exc) {
    if (exc instanceof Error) {
        const cause = exc.cause;
        const detail = cause instanceof Error ? `: ${cause.message}` : "";
        return `${exc.name}: ${exc.message}${detail}`;
    }
    return String(exc);
}
function leaseSeconds(info) {
    const seen = Date.parse(String(info.last_seen_at ?? ""));
    const expires = Date.parse(String(info.expires_at ?? ""));
    return Number.isFinite(seen) && Number.isFinite(expires) ? Math.max(1, (expires - seen) / 1000) : 1800;
}
/** A session pinned to one immutable version. Its bundle is fetched once and kept for the
 * session's life (by content hash, revalidated with If-None-Match, never a TTL). */
export class PinnedSession {
    registry;
    id;
    bundleName;
    version;
    contentHash;
    label;
    leaseSeconds;
    offline;
    info;
    ended = false;
    /** Why the keep-alive stopped before the session ended, if it did. */
    keepAliveError = null;
    pinned = null;
    /** The prefix this session holds, by its hash: sent once per session. */
    heldPrefix = null;
    /** Answers that carried the prefix's bytes (once per session unless the prefix changed). */
    prefixReceived = 0;
    keeper = null;
    keeping = false;
    beat = null;
    stopKeeper = new AbortController();
    constructor(registry, info, options = {}) {
        this.registry = registry;
        this.info = info;
        this.id = info.id;
        this.bundleName = info.bundle;
        this.version = info.version;
        this.contentHash = info.content_hash;
        this.label = info.label ?? null;
        this.leaseSeconds = leaseSeconds(info);
        this.offline = options.offline ?? false;
    }
    static offlineFrom(registry, pinned, label) {
        const info = { id: "", bundle: pinned.name, version: pinned.version, content_hash: pinned.contentHash, label };
        const session = new PinnedSession(registry, info, { offline: true });
        session.pinned = pinned;
        return session;
    }
    /** The pinned bundle: fetched on first use (a 304 when this registry already holds the same
     * content hash from another session), then served from memory. */
    async bundle(options = {}) {
        if (this.pinned === null)
            this.pinned = await this.fetchBundle(options);
        return this.pinned;
    }
    /** Ask the registry whether the session still stands (renewing its lease); throws
     * SessionEnded or VersionRevoked. The bytes come back only if never fetched: a 304. */
    async refresh(options = {}) {
        if (this.offline)
            return this.bundle(options);
        this.pinned = await this.fetchBundle(options);
        return this.pinned;
    }
    async fetchBundle(options) {
        await this.annotateSpan();
        const known = this.pinned ?? this.registry.bundles.get(this.contentHash);
        const headers = known ? { "If-None-Match": `"${this.contentHash}"` } : {};
        const response = await this.registry.request("GET", sessionPath(this.id, "bundle/"), { ...options, headers });
        if (response.status === 304 && known)
            return known;
        const pinned = await Bundle.fromBody(new Uint8Array(await response.arrayBuffer()));
        this.registry.bundles.put(pinned);
        return pinned;
    }
    /** Renew the lease; throws SessionEnded once the session is over. */
    async heartbeat(options = {}) {
        if (this.offline)
            return this.info;
        await this.annotateSpan();
        this.info = await this.registry.json("POST", sessionPath(this.id, "heartbeat/"), options);
        return this.info;
    }
    /** Heartbeat every `interval` seconds (default a third of the lease, so two can fail before it
     * lapses) until the session ends. Timers are unref'd: they never keep a process alive. A
     * failure the retries cannot fix within the lease stops it and is kept in `keepAliveError`. */
    keepAlive(interval) {
        if (this.offline || this.keeping || this.ended)
            return this;
        this.keeping = true;
        const every = interval ?? Math.max(0.5, this.leaseSeconds / 3);
        const schedule = () => {
            this.keeper = setTimeout(() => {
                this.beat = (async () => {
                    try {
                        // Retrying longer than the lease is pointless: the session would be gone.
                        this.info = await this.registry.json("POST", sessionPath(this.id, "heartbeat/"), {
                            deadline: Math.max(1, this.leaseSeconds - every),
                            signal: this.stopKeeper.signal,
                        });
                        if (this.keeping)
                            schedule();
                    }
                    catch (exc) {
                        if (this.stopKeeper.signal.aborted)
                            return;
                        this.keeping = false;
                        this.keepAliveError = exc instanceof RegistryError ? exc : new RegistryError(String(exc));
                        console.warn(`promptreg: keep-alive of session ${this.id} stopped: ${this.keepAliveError.message}`);
                    }
                })();
            }, every * 1000);
            this.keeper.unref?.();
        };
        schedule();
        return this;
    }
    /** Whether the keep-alive is running. */
    get keepingAlive() {
        return this.keeping;
    }
    async stopKeepAlive() {
        this.keeping = false;
        if (this.keeper !== null)
            clearTimeout(this.keeper);
        this.keeper = null;
        this.stopKeeper.abort();
        await this.beat?.catch(() => undefined);
    }
    /** End the session (idempotent) and stop the keep-alive. `outcome` (`resolved`, `escalated`,
     * `abandoned`, `failed`) and `reason`: how it went, for the version's evidence
     * (docs/api.md#evidence); another outcome than the first is refused (409). `end(options)`
     * without an outcome also works. */
    async end(outcome, options = {}) {
        if (typeof outcome === "object")
            [outcome, options] = [undefined, outcome];
        await this.stopKeepAlive();
        if (this.offline || this.ended)
            return;
        const { reason, ...call } = options;
        const json = outcome === undefined ? undefined : { outcome: { status: outcome, ...(reason === undefined ? {} : { reason }) } };
        this.info = await this.registry.json("POST", sessionPath(this.id, "end/"), { ...call, json });
        this.ended = true;
    }
    /** A named score of this session (a user's thumbs, a judge's verdict), accepted up to 7 days
     * after its end; the same `id` again is recorded once. */
    async score(name, value, options = {}) {
        // As in the Python client, not a call that sets the span's attributes.
        if (this.offline)
            throw new Unavailable("score needs the registry; this session is offline (from a snapshot).");
        const { source, comment, id, ...call } = options;
        const json = { name, value };
        for (const [key, given] of Object.entries({ source, comment, id }))
            if (given !== undefined)
                json[key] = given;
        return this.registry.json("POST", sessionPath(this.id, "scores/"), { ...call, json });
    }
    /** `await using`: ends the session when the block is left. When the block threw, a failure
     * to end is only logged, never masking that error (the lease ends the session anyway). The
     * language does not tell a disposer whether the block threw, so here an end that fails is
     * always logged and never thrown. */
    async [Symbol.asyncDispose]() {
        try {
            await this.end();
        }
        catch (exc) {
            console.warn(`promptreg: could not end session ${this.id} on exit: ${exc instanceof Error ? exc.message : exc}`);
        }
    }
    async online(what) {
        if (this.offline)
            throw new Unavailable(`${what} needs the registry; this session is offline (from a snapshot).`);
        await this.annotateSpan();
    }
    /** Set the pinned version on the caller's active OpenTelemetry span, when @opentelemetry/api
     * is installed (`gen_ai.prompt.name`, `gen_ai.prompt.version`, `registry.content_hash`,
     * `registry.session.id`); every session call does, as in the Python client. */
    async annotateSpan() {
        await annotate({ bundle: this.bundleName, version: this.version, contentHash: this.contentHash, sessionId: this.id });
    }
    /** The prompt for this turn: a byte-stable `prefix` (cacheable by `prefix_sha256`) and a
     * volatile `tail`. */
    async render(variables, options = {}) {
        await this.online("render");
        const json = variables === undefined ? {} : { variables };
        return this.registry.json("POST", sessionPath(this.id, "render/"), { ...options, json });
    }
    /** One call per turn: what render, route, turns and compact answer, in one request. The
     * stable prefix crosses the network once per session (and format): later calls send its hash,
     * and when the registry answers `prefix_unchanged` the held prefix is put back into the
     * answer, and with `format` the held stable part of `request` too (`request_reuse`), so the
     * answer is always whole. With `format`, `request` is the provider request body, ready to send. */
    async turn(messages, options = {}) {
        await this.online("turn");
        const { invoked, variables, format, k, response, usage, model, ...call } = options;
        if (format !== undefined && !TURN_FORMATS.includes(format)) {
            throw new TypeError(`format must be one of ${TURN_FORMATS.join(", ")}, or absent for the neutral shape.`);
        }
        const json = { messages };
        if (invoked !== undefined)
            json["invoked"] = invoked;
        if (variables !== undefined)
            json["variables"] = variables;
        if (format !== undefined)
            json["format"] = format;
        if (k !== undefined)
            json["k"] = k;
        if (response !== undefined)
            json["response"] = response; // the previous model call's answer
        if (usage !== undefined)
            json["usage"] = usage;
        if (model !== undefined)
            json["model"] = model;
        const held = this.heldPrefix;
        // Only what can be put back may be left out: a format asked for the first time on this
        // prefix comes whole (a client cannot lay out a provider's request itself).
        if (held !== null && (format === undefined || held.requests.has(format)))
            json["prefix_sha256"] = held.sha256;
        // Typed loosely while it is put together; the answer is cast to the caller's types at the end.
        const answer = { ...(await this.registry.json("POST", sessionPath(this.id, "turn/"), { ...call, json })) };
        let current = held;
        if (answer.prefix_unchanged) {
            if (held === null || answer.prefix_sha256 !== held.sha256) {
                throw new IntegrityError("The registry said the prefix is unchanged, but this client holds another.");
            }
            answer.prefix = held.prefix;
        }
        else {
            if (held === null || held.sha256 !== answer.prefix_sha256) {
                current = { sha256: answer.prefix_sha256, prefix: answer.prefix, requests: new Map() };
            }
            else {
                current = { ...held, prefix: answer.prefix };
            }
            this.heldPrefix = current;
            this.prefixReceived++;
        }
        const fmt = answer["format"];
        if (typeof fmt === "string" && answer.request !== undefined && current !== null) {
            const reuse = answer["request_reuse"];
            delete answer["request_reuse"];
            if (reuse) {
                const whole = current.requests.get(fmt);
                if (whole === undefined)
                    throw new IntegrityError(`The registry left out the stable part of a ${fmt} request this client never held.`);
                answer.request = wholeRequest(answer.request, whole, reuse);
            }
            current.requests.set(fmt, answer.request);
            // Carried once, in `request`: the caller still gets the conversation as `messages`.
            if (answer.messages === undefined)
                answer.messages = turnConversation(fmt, answer.request, String(answer["turn_text"] ?? ""));
        }
        return answer;
    }
    /** The skills to show this turn: resident, routed (with scores and why) and session ones. */
    async route(messages, options = {}) {
        await this.online("route");
        const { k = 5, ...call } = options;
        return this.registry.json("POST", sessionPath(this.id, "route/"), { ...call, json: { messages, k } });
    }
    /** Tell the registry which skills the model actually called in `turn`. */
    async reportTurn(turn, invoked, options = {}) {
        await this.online("reportTurn");
        return this.registry.json("POST", sessionPath(this.id, "turns/"), { ...options, json: { turn, invoked } });
    }
    /** One of the model's file tools over the session's knowledge packs (`ls`, `glob`, `grep`,
     * `read`; params as docs/rendering.md gives them): the text for the model (at most 100 KB). */
    async fileTool(tool, params = {}, options = {}) {
        await this.online("fileTool");
        if (!["ls", "glob", "grep", "read"].includes(tool))
            throw new TypeError("tool must be one of ls, glob, grep, read.");
        const query = Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined && v !== null).map(([k, v]) => [k, String(v)]));
        const answer = await this.registry.json("GET", sessionPath(this.id, `knowledge/${tool}`), { ...options, query });
        return String(answer.output);
    }
    /** Tier-1 micro-compaction of old tool results under the pinned policy, by the registry. */
    async compact(messages, options = {}) {
        await this.online("compact");
        return this.registry.json("POST", sessionPath(this.id, "compact/"), { ...options, json: { messages } });
    }
}
