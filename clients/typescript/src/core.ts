/** What the client needs besides HTTP: the retry schedule, the pinned bundle and its
 * content-hash cache. Only web-platform APIs (fetch, crypto.subtle, AbortSignal). */

import { IntegrityError, RegistryError, Throttled, Unavailable } from "./errors.js";

export const API = "/api/v1";
export const USER_AGENT = "promptreg-ts/0.1";

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

export class Retry {
  readonly deadline: number;
  readonly initial: number;
  readonly maximum: number;
  readonly multiplier: number;
  readonly timeout: number;

  constructor(options: RetryOptions = {}) {
    this.deadline = options.deadline ?? 30;
    this.initial = options.initial ?? 0.2;
    this.maximum = options.maximum ?? 5;
    this.multiplier = options.multiplier ?? 2;
    this.timeout = options.timeout ?? 10;
  }

  with(options: RetryOptions): Retry {
    return new Retry({ ...this, ...options });
  }

  /** Seconds to wait before the next attempt, or null to give up and throw `error`. */
  wait(error: RegistryError, attempt: number, elapsed: number, random: () => number = Math.random): number | null {
    if (!(error instanceof Unavailable || error instanceof Throttled)) return null;
    const ceiling = Math.min(this.maximum, this.initial * this.multiplier ** attempt);
    let wait = random() * ceiling; // full jitter: clients that failed together spread out
    if (error.retryAfter !== null) wait = Math.max(wait, error.retryAfter);
    if (elapsed + wait >= this.deadline) return null;
    return wait;
  }

  attemptTimeout(elapsed: number): number {
    return Math.max(0.1, Math.min(this.timeout, this.deadline - elapsed));
  }
}

/** The JSON of a pinned bundle's content (the bundle's fields are open-ended). */
export type Content = Record<string, unknown> & { system_prompt: string };

/** A pinned bundle: immutable, named by its content hash. `raw` is the exact body the registry
 * served (the same bytes on every fetch, for every session of this version). */
export class Bundle {
  constructor(
    readonly name: string,
    readonly version: number,
    readonly contentHash: string,
    readonly content: Content,
    readonly raw: Uint8Array,
  ) {
    Object.freeze(this);
  }

  /** Parse and check a pinned-bundle body. The body is the canonical JSON of
   * {"bundle", "content", "content_hash", "version"} (keys sorted), so the content's exact
   * canonical bytes are a slice of it: those are hashed, never a re-serialisation (JSON.stringify
   * would write 1.0 as 1 and break the hash). */
  static async fromBody(raw: Uint8Array): Promise<Bundle> {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(raw);
    const doc = JSON.parse(text) as { bundle: string; version: number; content_hash: string; content: Content };
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

  get systemPrompt(): string {
    return this.content.system_prompt;
  }
  get tools(): Record<string, unknown>[] {
    return (this.content["tools"] as Record<string, unknown>[] | undefined) ?? [];
  }
  get guardrails(): Record<string, unknown> {
    return (this.content["guardrails"] as Record<string, unknown> | undefined) ?? {};
  }
  get outputSchema(): Record<string, unknown> | null {
    return (this.content["output_schema"] as Record<string, unknown> | undefined) ?? null;
  }
  get model(): Record<string, unknown> {
    return (this.content["model"] as Record<string, unknown> | undefined) ?? {};
  }
  get metadata(): Record<string, unknown> {
    return (this.content["metadata"] as Record<string, unknown> | undefined) ?? {};
  }
}

async function sha256Hex(data: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data as BufferSource));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Bundles by content hash. No TTL anywhere: a hash names bytes that can never change, so an
 * entry is never stale; the bound only limits memory (least recently used goes first). */
export class BundleCache {
  private readonly items = new Map<string, Bundle>();
  constructor(private readonly size = 64) {}

  get(contentHash: string): Bundle | undefined {
    const bundle = this.items.get(contentHash);
    if (bundle !== undefined) {
      this.items.delete(contentHash);
      this.items.set(contentHash, bundle);
    }
    return bundle;
  }

  put(bundle: Bundle): void {
    this.items.delete(bundle.contentHash);
    this.items.set(bundle.contentHash, bundle);
    while (this.items.size > this.size) {
      const oldest = this.items.keys().next().value as string;
      this.items.delete(oldest);
    }
  }
}

export function newExternalId(): string {
  return `promptreg-${crypto.randomUUID().replaceAll("-", "")}`;
}

export function sessionPath(id: string, tail = ""): string {
  return `${API}/sessions/${encodeURIComponent(id)}/${tail}`;
}

/** Resolves after `seconds`, or rejects with the signal's reason when it aborts first. */
export function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
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
export function attemptSignal(seconds: number, outer?: AbortSignal): { signal: AbortSignal; timedOut: () => boolean; done: () => void } {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new Error("attempt timed out"));
  }, seconds * 1000);
  const onAbort = () => controller.abort(outer?.reason);
  if (outer?.aborted) onAbort();
  else outer?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    done: () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  };
}
