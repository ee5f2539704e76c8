/** `Registry` and the `PinnedSession` it starts: the same promise as the Python client. */
import { Bundle, BundleCache, Retry } from "./core.js";
import type { RetryOptions } from "./core.js";
import { RegistryError } from "./errors.js";
import type { components } from "./openapi.js";
import { Snapshots } from "./snapshots.js";
import type { TurnRequest } from "./providers.js";
import type { TraceHeaders } from "./tracing.js";
type Schemas = components["schemas"];
/** A session resource, as the OpenAPI document describes it. */
export type SessionInfo = Schemas["SessionOut"];
export type RenderResult = Schemas["RenderOut"];
export type RouteResult = Schemas["RouteOut"];
export type CompactResult = Schemas["CompactOut"];
export type Message = Record<string, unknown>;
/** The provider shapes the one-call turn can answer `request` in. */
export type TurnFormat = "anthropic" | "openai-responses" | "openai-chat" | "bedrock-converse" | "gemini";
export declare const TURN_FORMATS: readonly TurnFormat[];
/** The stable prefix of a turn: the system text and the tools, byte-stable for the session. */
export interface TurnPrefixBody {
    system: string;
    tools: Record<string, unknown>[];
}
/** What every turn answer carries, whatever its format. */
interface TurnAnswer {
    turn: number;
    version: number;
    content_hash: string;
    prefix_sha256: string;
    prefix: TurnPrefixBody;
    prefix_unchanged?: boolean;
    tail: string;
    notices: {
        path: string;
        change: string;
    }[];
    skills: {
        resident: string[];
        routed: Record<string, unknown>[];
        session: string[];
        demoted: string[];
    } & Record<string, unknown>;
    /** What the registry left out of `request` by the pinned model settings, one line each. */
    request_notes?: string[];
    cache?: Record<string, unknown>;
    [key: string]: unknown;
}
/** The one-call turn's answer, its `prefix` always present (the held one when the registry
 * answered `prefix_unchanged`). `F` is the `format` asked for: `request` is that provider's
 * body, typed per format (absent without a format); `M` is the type of the messages sent. */
export interface TurnResult<F extends TurnFormat | undefined = TurnFormat | undefined, M extends object = Message> extends TurnAnswer {
    /** The compacted conversation; with `format` the registry carries it in `request` only and the
     * client takes it from there (`turnConversation`), in the format's shape. */
    messages: M[];
    request: TurnRequest<F, M>;
}
/** What a `request` answered with `prefix_unchanged` leaves out (docs/api.md, the turn call). */
export interface RequestReuse {
    keys: string[];
    list: string;
    messages: number;
}
/** A request the registry sent without its stable part, completed from `held` (the last complete
 * request of the same format and prefix) as `reuse` says. */
export declare function wholeRequest(partial: Record<string, unknown>, held: Record<string, unknown>, reuse: RequestReuse): Record<string, unknown>;
/** The compacted conversation a complete `request` carries (a turn answered with `format` leaves
 * `messages` out): its list less the leading entries and less the per-turn text, which is the
 * last entry's last block (`content` or `parts`), or that entry whole when it holds only the text. */
export declare function turnConversation(format: TurnFormat, request: Record<string, unknown>, turnText: string): Message[];
export interface TurnOptions<F extends TurnFormat | undefined = TurnFormat | undefined> extends CallOptions {
    /** The skills the model called in the previous turn. */
    invoked?: string[];
    /** Turn-scoped variables, as render takes them. */
    variables?: Record<string, unknown>;
    /** Answer `request` in this provider's shape, ready to send. */
    format?: F;
    k?: number;
    /** The provider's answer to the previous `request`, as the SDK returned it (its JSON shape):
     * the registry reads its usage (the version's evidence, docs/api.md#evidence). */
    response?: unknown;
    /** The previous model call's usage in the neutral shape, instead of or beside `response`. */
    usage?: TurnUsage;
    /** The model to name in `request` instead of the pinned one: one the version allows
     * (`model.allowed`), or any when it names none. */
    model?: string;
}
/** A model call's usage in the neutral shape the turn call takes. */
export interface TurnUsage {
    input_tokens?: number;
    output_tokens?: number;
    cache_read_tokens?: number;
    cache_write_tokens?: number;
    model?: string;
    stop_reason?: string;
    latency_ms?: number;
}
/** How a session went, given when it ends. */
export type Outcome = "resolved" | "escalated" | "abandoned" | "failed";
export interface EndOptions extends CallOptions {
    /** Why it went so (with an outcome). */
    reason?: string;
}
export interface ScoreOptions extends CallOptions {
    /** Who scored: `user`, `judge`, `human`, or a name of yours. */
    source?: string;
    comment?: string;
    /** The score's id: the same id again is recorded once. */
    id?: string;
}
/** Per call: an AbortSignal, and a deadline (seconds) that replaces the registry's for this call. */
export interface CallOptions {
    signal?: AbortSignal;
    deadline?: number;
}
export interface RegistryOptions {
    retry?: RetryOptions;
    /** A fetch implementation (default the platform's `fetch`): for proxies, tests, or tracing. */
    fetch?: typeof fetch;
    /** A directory for offline snapshots per (bundle, label), where the runtime has a file system. */
    snapshotDir?: string;
    /** Called on every retry, with what failed and the wait in seconds. */
    onRetry?: (info: {
        method: string;
        path: string;
        error: RegistryError;
        wait: number;
    }) => void;
    /** The W3C trace headers (`traceparent`, `tracestate`) of the current call, replacing the
     * default: the active span's, through @opentelemetry/api when it is installed. */
    traceHeaders?: TraceHeaders;
}
export interface StartOptions extends CallOptions {
    label?: string;
    version?: number;
    routingKey?: string;
    externalId?: string;
    variables?: Record<string, unknown>;
    ttlSeconds?: number;
    keepAlive?: boolean;
}
export interface RequestOptions extends CallOptions {
    json?: unknown;
    headers?: Record<string, string>;
    query?: Record<string, string | number>;
}
/** A connection to one registry with one API key. `baseUrl` is the service root
 * (`http://127.0.0.1:8000`). */
export declare class Registry {
    readonly url: string;
    readonly retry: Retry;
    readonly bundles: BundleCache;
    readonly snapshots: Snapshots | null;
    private readonly apiKey;
    private readonly fetchImpl;
    private readonly onRetry;
    private readonly traceHook;
    constructor(baseUrl: string, apiKey: string, options?: RegistryOptions);
    /** Send one request, retrying as `retry` says; a 2xx or 304 is returned, any other answer
     * throws its typed error. An aborted signal rejects at once with the signal's reason. */
    request(method: string, path: string, options?: RequestOptions): Promise<Response>;
    json<T = unknown>(method: string, path: string, options?: RequestOptions): Promise<T>;
    /** Pin a session to what `label` (default production) targets now, or to `version`, and
     * fetch its bundle. `await using session = await registry.startSession(...)` ends it when the
     * block is left, also on an exception. */
    startSession(bundle: string, options?: StartOptions): Promise<PinnedSession>;
    /** An existing session (e.g. one an earlier process started), by id. */
    session(id: string, options?: CallOptions): Promise<PinnedSession>;
    /** What this key may start sessions on, every page. */
    catalog(options?: CallOptions): Promise<Schemas["CatalogEntryOut"][]>;
}
/** A session pinned to one immutable version. Its bundle is fetched once and kept for the
 * session's life (by content hash, revalidated with If-None-Match, never a TTL). */
export declare class PinnedSession implements AsyncDisposable {
    readonly registry: Registry;
    readonly id: string;
    readonly bundleName: string;
    readonly version: number;
    readonly contentHash: string;
    readonly label: string | null;
    readonly leaseSeconds: number;
    readonly offline: boolean;
    info: SessionInfo;
    ended: boolean;
    /** Why the keep-alive stopped before the session ended, if it did. */
    keepAliveError: RegistryError | null;
    private pinned;
    /** The prefix this session holds, by its hash: sent once per session. */
    private heldPrefix;
    /** Answers that carried the prefix's bytes (once per session unless the prefix changed). */
    prefixReceived: number;
    private keeper;
    private keeping;
    private beat;
    private stopKeeper;
    constructor(registry: Registry, info: SessionInfo, options?: {
        offline?: boolean;
    });
    static offlineFrom(registry: Registry, pinned: Bundle, label: string | null): PinnedSession;
    /** The pinned bundle: fetched on first use (a 304 when this registry already holds the same
     * content hash from another session), then served from memory. */
    bundle(options?: CallOptions): Promise<Bundle>;
    /** Ask the registry whether the session still stands (renewing its lease); throws
     * SessionEnded or VersionRevoked. The bytes come back only if never fetched: a 304. */
    refresh(options?: CallOptions): Promise<Bundle>;
    private fetchBundle;
    /** Renew the lease; throws SessionEnded once the session is over. */
    heartbeat(options?: CallOptions): Promise<SessionInfo>;
    /** Heartbeat every `interval` seconds (default a third of the lease, so two can fail before it
     * lapses) until the session ends. Timers are unref'd: they never keep a process alive. A
     * failure the retries cannot fix within the lease stops it and is kept in `keepAliveError`. */
    keepAlive(interval?: number): this;
    /** Whether the keep-alive is running. */
    get keepingAlive(): boolean;
    private stopKeepAlive;
    /** End the session (idempotent) and stop the keep-alive. `outcome` (`resolved`, `escalated`,
     * `abandoned`, `failed`) and `reason`: how it went, for the version's evidence
     * (docs/api.md#evidence); another outcome than the first is refused (409). `end(options)`
     * without an outcome also works. */
    end(outcome?: Outcome | EndOptions, options?: EndOptions): Promise<void>;
    /** A named score of this session (a user's thumbs, a judge's verdict), accepted up to 7 days
     * after its end; the same `id` again is recorded once. */
    score(name: string, value: number, options?: ScoreOptions): Promise<Record<string, unknown>>;
    /** `await using`: ends the session when the block is left. When the block threw, a failure
     * to end is only logged, never masking that error (the lease ends the session anyway). The
     * language does not tell a disposer whether the block threw, so here an end that fails is
     * always logged and never thrown. */
    [Symbol.asyncDispose](): Promise<void>;
    private online;
    /** Set the pinned version on the caller's active OpenTelemetry span, when @opentelemetry/api
     * is installed (`gen_ai.prompt.name`, `gen_ai.prompt.version`, `registry.content_hash`,
     * `registry.session.id`); every session call does, as in the Python client. */
    annotateSpan(): Promise<void>;
    /** The prompt for this turn: a byte-stable `prefix` (cacheable by `prefix_sha256`) and a
     * volatile `tail`. */
    render(variables?: Record<string, unknown>, options?: CallOptions): Promise<RenderResult>;
    /** One call per turn: what render, route, turns and compact answer, in one request. The
     * stable prefix crosses the network once per session (and format): later calls send its hash,
     * and when the registry answers `prefix_unchanged` the held prefix is put back into the
     * answer, and with `format` the held stable part of `request` too (`request_reuse`), so the
     * answer is always whole. With `format`, `request` is the provider request body, ready to send. */
    turn<M extends object = Message, F extends TurnFormat | undefined = undefined>(messages: readonly M[], options?: TurnOptions<F>): Promise<TurnResult<F, M>>;
    /** The skills to show this turn: resident, routed (with scores and why) and session ones. */
    route(messages: Message[], options?: CallOptions & {
        k?: number;
    }): Promise<RouteResult>;
    /** Tell the registry which skills the model actually called in `turn`. */
    reportTurn(turn: number, invoked: string[], options?: CallOptions): Promise<Record<string, unknown>>;
    /** One of the model's file tools over the session's knowledge packs (`ls`, `glob`, `grep`,
     * `read`; params as docs/rendering.md gives them): the text for the model (at most 100 KB). */
    fileTool(tool: "ls" | "glob" | "grep" | "read", params?: Record<string, unknown>, options?: CallOptions): Promise<string>;
    /** Tier-1 micro-compaction of old tool results under the pinned policy, by the registry. */
    compact(messages: Message[], options?: CallOptions): Promise<CompactResult>;
}
export {};
