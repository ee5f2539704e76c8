/** What the client needs besides HTTP: the retry schedule, the pinned bundle and its
 * content-hash cache. Only web-platform APIs (fetch, crypto.subtle, AbortSignal). */
import { RegistryError } from "./errors.js";
export declare const API = "/api/v1";
export declare const USER_AGENT = "promptreg-ts/0.1";
/** Exponential backoff with full jitter, bounded by a total deadline per call (seconds).
 *
 * Retried: connection errors and timeouts, 502, 503, 504 and 429 (waiting at least the
 * server's Retry-After). Never retried: any other 4xx. Everything the client retries is
 * idempotent; session starts always carry an external id, so a retried start returns the
 * same session. */
export interface RetryOptions {
    /** Seconds for one call, every attempt and wait included. Default 30. */
    deadline?: number;
    /** First backoff ceiling in seconds. Default 0.2. */
    initial?: number;
    /** Largest backoff ceiling in seconds. Default 5. */
    maximum?: number;
    /** Default 2. */
    multiplier?: number;
    /** Seconds per attempt, cut to what is left of the deadline. Default 10. */
    timeout?: number;
}
export declare class Retry {
    readonly deadline: number;
    readonly initial: number;
    readonly maximum: number;
    readonly multiplier: number;
    readonly timeout: number;
    constructor(options?: RetryOptions);
    with(options: RetryOptions): Retry;
    /** Seconds to wait before the next attempt, or null to give up and throw `error`. */
    wait(error: RegistryError, attempt: number, elapsed: number, random?: () => number): number | null;
    attemptTimeout(elapsed: number): number;
}
/** The JSON of a pinned bundle's content (the bundle's fields are open-ended). */
export type Content = Record<string, unknown> & {
    system_prompt: string;
};
/** A pinned bundle: immutable, named by its content hash. `raw` is the exact body the registry
 * served (the same bytes on every fetch, for every session of this version). */
export declare class Bundle {
    readonly name: string;
    readonly version: number;
    readonly contentHash: string;
    readonly content: Content;
    readonly raw: Uint8Array;
    constructor(name: string, version: number, contentHash: string, content: Content, raw: Uint8Array);
    /** Parse and check a pinned-bundle body. The body is the canonical JSON of
     * {"bundle", "content", "content_hash", "version"} (keys sorted), so the content's exact
     * canonical bytes are a slice of it: those are hashed, never a re-serialisation (JSON.stringify
     * would write 1.0 as 1 and break the hash). */
    static fromBody(raw: Uint8Array): Promise<Bundle>;
    get systemPrompt(): string;
    get tools(): Record<string, unknown>[];
    get guardrails(): Record<string, unknown>;
    get outputSchema(): Record<string, unknown> | null;
    get model(): Record<string, unknown>;
    get metadata(): Record<string, unknown>;
}
/** Bundles by content hash. No TTL anywhere: a hash names bytes that can never change, so an
 * entry is never stale; the bound only limits memory (least recently used goes first). */
export declare class BundleCache {
    private readonly size;
    private readonly items;
    constructor(size?: number);
    get(contentHash: string): Bundle | undefined;
    put(bundle: Bundle): void;
}
export declare function newExternalId(): string;
export declare function sessionPath(id: string, tail?: string): string;
/** Resolves after `seconds`, or rejects with the signal's reason when it aborts first. */
export declare function sleep(seconds: number, signal?: AbortSignal): Promise<void>;
/** A signal that aborts when `outer` does or after `seconds`; `timedOut` tells which. */
export declare function attemptSignal(seconds: number, outer?: AbortSignal): {
    signal: AbortSignal;
    timedOut: () => boolean;
    done: () => void;
};
