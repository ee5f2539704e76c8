/** What the client needs besides HTTP: the retry schedule, the pinned bundle and its
 * content-hash cache. Only web-platform APIs (fetch, crypto.subtle, AbortSignal). */
import { IntegrityError, Throttled, Unavailable } from "./errors.js";
export const API = "/api/v1";
export const USER_AGENT = "promptreg-ts/0.1";
export class Retry {
    deadline;
    initial;
    maximum;
    multiplier;
    timeout;
    constructor(options = {}) {
        this.deadline = options.deadline ?? 30;
        this.initial = options.initial ?? 0.2;
        this.maximum = options.maximum ?? 5;
        this.multiplier = options.multiplier ?? 2;
        this.timeout = options.timeout ?? 10;
    }
    with(options) {
        return new Retry({ ...this, ...options });
    }
    /** Seconds to wait before the next attempt, or null to give up and throw `error`. */
    wait(error, attempt, elapsed, random = Math.random) {
        if (!(error instanceof Unavailable || error instanceof Throttled))
            return null;
        const ceiling = Math.min(this.maximum, this.initial * this.multiplier ** attempt);
        let wait = random() * ceiling; // full jitter: clients that failed together spread out
        if (error.retryAfter !== null)
            wait = Math.max(wait, error.retryAfter);
        if (elapsed + wait >= this.deadline)
            return null;
        return wait;
    }
    attemptTimeout(elapsed) {
        return Math.max(0.1, Math.min(this.timeout, this.deadline - elapsed));
    }
}
/** A pinned bundle: immutable, named by its content hash. `raw` is the exact body the registry
 * served (the same bytes on every fetch, for every session of this version). */
export class Bundle {
    name;
    version;
    contentHash;
    content;
    raw;
    constructor(name, version, contentHash, content, raw) {
        this.name = name;
        this.version = version;
        this.contentHash = contentHash;
        this.content = content;
        this.raw = raw;
        Object.freeze(this);
    }
    /** Parse and check a pinned-bundle body. The body is the canonical JSON of
     * {"bundle", "content", "content_hash", "version"} (keys sorted), so the content's exact
     * canonical bytes are a slice of it: those are hashed, never a re-serialisation (JSON.stringify
     * would write 1.0 as 1 and break the hash). */
    static async fromBody(raw) {
        const text = new TextDecoder("utf-8", { fatal: true }).decode(raw);
        const doc = JSON.parse(text);
        const head = `{"bundle":${JSON.stringify(doc.bundle)},"content":`;
        const tail = `,"content_hash":"${doc.content_hash}","version":${doc.version}}`;
        if (!text.startsWith(head) || !text.endsWith(tail)) {
            throw new IntegrityError(`Bundle ${doc.bundle} v${doc.version} is not in canonical form.`);
        }
        const contentBytes = new TextEncoder().encode(text.slice(head.length, text.length - tail.length));
        const digest = await sha256Hex(contentBytes);
        if (digest !== doc.content_hash) {
            throw new IntegrityError(`Bundle ${doc.bundle} v${doc.version} does not match its content hash.`);
        }
        return new Bundle(doc.bundle, doc.version, digest, Object.freeze(doc.content), raw);
    }
    get systemPrompt() {
        return this.content.system_prompt;
    }
    get tools() {
        return this.content["tools"] ?? [];
    }
    get guardrails() {
        return this.content["guardrails"] ?? {};
    }
    get outputSchema() {
        return this.content["output_schema"] ?? null;
    }
    get model() {
        return this.content["model"] ?? {};
    }
    get metadata() {
        return this.content["metadata"] ?? {};
    }
}
async function sha256Hex(data) {
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
    return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}
/** Bundles by content hash. No TTL anywhere: a hash names bytes that can never change, so an
 * entry is never stale; the bound only limits memory (least recently used goes first). */
export class BundleCache {
    size;
    items = new Map();
    constructor(size = 64) {
        this.size = size;
    }
    get(contentHash) {
        const bundle = this.items.get(contentHash);
        if (bundle !== undefined) {
            this.items.delete(contentHash);
            this.items.set(contentHash, bundle);
        }
        return bundle;
    }
    put(bundle) {
        this.items.delete(bundle.contentHash);
        this.items.set(bundle.contentHash, bundle);
        while (this.items.size > this.size) {
            const oldest = this.items.keys().next().value;
            this.items.delete(oldest);
        }
    }
}
export function newExternalId() {
    return `promptreg-${crypto.randomUUID().replaceAll("-", "")}`;
}
export function sessionPath(id, tail = "") {
    return `${API}/sessions/${encodeURIComponent(id)}/${tail}`;
}
/** Resolves after `seconds`, or rejects with the signal's reason when it aborts first. */
export function sleep(seconds, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal?.reason);
        };
        const timer = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, seconds * 1000);
        signal?.addEventListener("abort", onAbort, { once: true });
    });
}
/** A signal that aborts when `outer` does or after `seconds`; `timedOut` tells which. */
export function attemptSignal(seconds, outer) {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
        timedOut = true;
        controller.abort(new Error("attempt timed out"));
    }, seconds * 1000);
    const onAbort = () => controller.abort(outer?.reason);
    if (outer?.aborted)
        onAbort();
    else
        outer?.addEventListener("abort", onAbort, { once: true });
    return {
        signal: controller.signal,
        timedOut: () => timedOut,
        done: () => {
            clearTimeout(timer);
            outer?.removeEventListener("abort", onAbort);
        },
    };
}
