/** `Registry` and the `PinnedSession` it starts: the same promise as the Python client. */

import { API, Bundle, BundleCache, Retry, USER_AGENT, attemptSignal, newExternalId, sessionPath, sleep } from "./core.js";
import type { RetryOptions } from "./core.js";
import { IntegrityError, RegistryError, Unavailable, errorFromResponse } from "./errors.js";
import type { components } from "./openapi.js";
import { Snapshots, warnOffline } from "./snapshots.js";
import type { TurnRequest } from "./providers.js";
import { annotate, traceHeaders } from "./tracing.js";
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
export const TURN_FORMATS: readonly TurnFormat[] = ["anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini"];
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
  notices: { path: string; change: string }[];
  skills: { resident: string[]; routed: Record<string, unknown>[]; session: string[]; demoted: string[] } & Record<string, unknown>;
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
/** A turn's answer as the wire has it, before it is typed for the caller. */
interface LooseTurn extends TurnAnswer {
  messages?: Message[]; // left out with `format`: the conversation is in `request`
  request?: Record<string, unknown>;
}
/** What a `request` answered with `prefix_unchanged` leaves out (docs/api.md, the turn call). */
export interface RequestReuse {
  keys: string[];
  list: string;
  messages: number;
}

/** A request the registry sent without its stable part, completed from `held` (the last complete
 * request of the same format and prefix) as `reuse` says. */
export function wholeRequest(partial: Record<string, unknown>, held: Record<string, unknown>, reuse: RequestReuse): Record<string, unknown> {
  const whole: Record<string, unknown> = {};
  for (const key of Object.keys(held)) if (reuse.keys.includes(key)) whole[key] = held[key];
  Object.assign(whole, partial);
  const lead = (held[reuse.list] as unknown[] | undefined)?.slice(0, reuse.messages) ?? [];
  whole[reuse.list] = [...lead, ...((partial[reuse.list] as unknown[] | undefined) ?? [])];
  return whole;
}

// Where a request holds the conversation: its list, and how many entries lead it (openai-chat's
// system message); the per-turn text follows it (docs/api.md, the turn call).
const REQUEST_CONVERSATION: Record<TurnFormat, [string, number]> = {
  anthropic: ["messages", 0],
  "openai-chat": ["messages", 1],
  "openai-responses": ["input", 0],
  "bedrock-converse": ["messages", 0],
  gemini: ["contents", 0],
};

/** The compacted conversation a complete `request` carries (a turn answered with `format` leaves
 * `messages` out): its list less the leading entries and less the per-turn text, which is the
 * last entry's last block (`content` or `parts`), or that entry whole when it holds only the text. */
export function turnConversation(format: TurnFormat, request: Record<string, unknown>, turnText: string): Message[] {
  const [key, lead] = REQUEST_CONVERSATION[format];
  const entries = ((request[key] as Record<string, unknown>[] | undefined) ?? []).slice(lead);
  const last = entries[entries.length - 1];
  if (!turnText || last === undefined || last === null || typeof last !== "object") return entries as unknown as Message[];
  const field = format === "gemini" ? "parts" : "content";
  const held = last[field];
  if (held === turnText) return entries.slice(0, -1) as unknown as Message[];
  if (Array.isArray(held) && held.length) {
    const block = held[held.length - 1] as Record<string, unknown> | null;
    if (block !== null && typeof block === "object" && block["text"] === turnText) {
      const rest = held.slice(0, -1);
      const kept = rest.length ? [...entries.slice(0, -1), { ...last, [field]: rest }] : entries.slice(0, -1);
      return kept as unknown as Message[];
    }
  }
  return entries as unknown as Message[];
}

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
  onRetry?: (info: { method: string; path: string; error: RegistryError; wait: number }) => void;
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
export class Registry {
  readonly url: string;
  readonly retry: Retry;
  readonly bundles = new BundleCache();
  readonly snapshots: Snapshots | null;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;
  private readonly onRetry: RegistryOptions["onRetry"];
  private readonly traceHook: TraceHeaders | undefined;

  constructor(baseUrl: string, apiKey: string, options: RegistryOptions = {}) {
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
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const retry = options.deadline === undefined ? this.retry : this.retry.with({ deadline: options.deadline });
    const began = performance.now();
    const elapsed = () => (performance.now() - began) / 1000;
    let url = path.startsWith("http") ? path : `${this.url}${path}`;
    if (options.query) url += `?${new URLSearchParams(Object.entries(options.query).map(([k, v]) => [k, String(v)]))}`;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.apiKey}`,
      "User-Agent": USER_AGENT,
      Accept: "application/json",
      ...(await traceHeaders(this.traceHook)),
      ...options.headers,
    };
    let body: string | undefined;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["Content-Type"] = "application/json";
    }
    for (let attempt = 0; ; attempt++) {
      options.signal?.throwIfAborted();
      const guard = attemptSignal(retry.attemptTimeout(elapsed()), options.signal);
      let error: RegistryError;
      try {
        const response = await this.fetchImpl(url, { method, headers, body, signal: guard.signal });
        if (response.status < 400) return response;
        error = await errorFromResponse(response);
      } catch (exc) {
        if (options.signal?.aborted) throw options.signal.reason;
        if (exc instanceof RegistryError) throw exc;
        const why = guard.timedOut() ? "timed out" : describe(exc);
        error = new Unavailable(`Cannot reach the registry at ${this.url}: ${why}`);
      } finally {
        guard.done();
      }
      const wait = retry.wait(error, attempt, elapsed());
      if (wait === null) throw error;
      this.onRetry?.({ method, path, error, wait });
      await sleep(wait, options.signal);
    }
  }

  async json<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.request(method, path, options);
    return (await response.json()) as T;
  }

  /** Pin a session to what `label` (default production) targets now, or to `version`, and
   * fetch its bundle. `await using session = await registry.startSession(...)` ends it when the
   * block is left, also on an exception. */
  async startSession(bundle: string, options: StartOptions = {}): Promise<PinnedSession> {
    if (options.label !== undefined && options.version !== undefined) {
      throw new TypeError("Give label or version, not both.");
    }
    const body: Record<string, unknown> = { bundle, external_id: options.externalId ?? newExternalId() };
    if (options.label !== undefined) body["label"] = options.label;
    if (options.version !== undefined) body["version"] = options.version;
    if (options.routingKey !== undefined) body["routing_key"] = options.routingKey;
    if (options.variables !== undefined) body["variables"] = options.variables;
    if (options.ttlSeconds !== undefined) body["ttl_seconds"] = options.ttlSeconds;
    const call = { signal: options.signal, deadline: options.deadline };
    let session: PinnedSession;
    let pinned: Bundle;
    try {
      const info = await this.json<SessionInfo>("POST", `${API}/sessions/`, { ...call, json: body });
      session = new PinnedSession(this, info);
      await session.annotateSpan(); // the span that started the session
      pinned = await session.bundle(call);
    } catch (exc) {
      const offline = exc instanceof Unavailable && this.snapshots ? await this.snapshots.load(bundle, options.label, options.version) : null;
      if (offline === null) throw exc;
      warnOffline(offline, options.label, exc as Unavailable);
      const fromSnapshot = PinnedSession.offlineFrom(this, offline, options.label ?? null);
      await fromSnapshot.annotateSpan();
      return fromSnapshot;
    }
    if (this.snapshots) await this.snapshots.save(pinned, options.label, options.version);
    if (options.keepAlive) session.keepAlive();
    return session;
  }

  /** An existing session (e.g. one an earlier process started), by id. */
  async session(id: string, options: CallOptions = {}): Promise<PinnedSession> {
    const session = new PinnedSession(this, await this.json<SessionInfo>("GET", sessionPath(id), options));
    await session.annotateSpan(); // the span that restored the session
    return session;
  }

  /** What this key may start sessions on, every page. */
  async catalog(options: CallOptions = {}): Promise<Schemas["CatalogEntryOut"][]> {
    const results: Schemas["CatalogEntryOut"][] = [];
    let next: string | null | undefined = `${API}/catalog/`;
    while (next) {
      const page: { results: Schemas["CatalogEntryOut"][]; next?: string | null } = await this.json("GET", next, options);
      results.push(...page.results);
      next = page.next;
    }
    return results;
  }
}

function describe(exc: unknown): string {
  if (exc instanceof Error) {
    const cause = (exc as Error & { cause?: unknown }).cause;
    const detail = cause instanceof Error ? `: ${cause.message}` : "";
    return `${exc.name}: ${exc.message}${detail}`;
  }
  return String(exc);
}

function leaseSeconds(info: SessionInfo): number {
  const seen = Date.parse(String(info.last_seen_at ?? ""));
  const expires = Date.parse(String(info.expires_at ?? ""));
  return Number.isFinite(seen) && Number.isFinite(expires) ? Math.max(1, (expires - seen) / 1000) : 1800;
}

/** A session pinned to one immutable version. Its bundle is fetched once and kept for the
 * session's life (by content hash, revalidated with If-None-Match, never a TTL). */
export class PinnedSession implements AsyncDisposable {
  readonly id: string;
  readonly bundleName: string;
  readonly version: number;
  readonly contentHash: string;
  readonly label: string | null;
  readonly leaseSeconds: number;
  readonly offline: boolean;
  info: SessionInfo;
  ended = false;
  /** Why the keep-alive stopped before the session ended, if it did. */
  keepAliveError: RegistryError | null = null;
  private pinned: Bundle | null = null;
  /** The prefix this session holds, by its hash: sent once per session. */
  private heldPrefix: { sha256: string; prefix: TurnPrefixBody; requests: Map<string, Record<string, unknown>> } | null = null;
  /** Answers that carried the prefix's bytes (once per session unless the prefix changed). */
  prefixReceived = 0;
  private keeper: ReturnType<typeof setTimeout> | null = null;
  private keeping = false;
  private beat: Promise<void> | null = null;
  private stopKeeper = new AbortController();

  constructor(
    readonly registry: Registry,
    info: SessionInfo,
    options: { offline?: boolean } = {},
  ) {
    this.info = info;
    this.id = info.id;
    this.bundleName = info.bundle;
    this.version = info.version;
    this.contentHash = info.content_hash;
    this.label = info.label ?? null;
    this.leaseSeconds = leaseSeconds(info);
    this.offline = options.offline ?? false;
  }

  static offlineFrom(registry: Registry, pinned: Bundle, label: string | null): PinnedSession {
    const info = { id: "", bundle: pinned.name, version: pinned.version, content_hash: pinned.contentHash, label } as SessionInfo;
    const session = new PinnedSession(registry, info, { offline: true });
    session.pinned = pinned;
    return session;
  }

  /** The pinned bundle: fetched on first use (a 304 when this registry already holds the same
   * content hash from another session), then served from memory. */
  async bundle(options: CallOptions = {}): Promise<Bundle> {
    if (this.pinned === null) this.pinned = await this.fetchBundle(options);
    return this.pinned;
  }

  /** Ask the registry whether the session still stands (renewing its lease); throws
   * SessionEnded or VersionRevoked. The bytes come back only if never fetched: a 304. */
  async refresh(options: CallOptions = {}): Promise<Bundle> {
    if (this.offline) return this.bundle(options);
    this.pinned = await this.fetchBundle(options);
    return this.pinned;
  }

  private async fetchBundle(options: CallOptions): Promise<Bundle> {
    await this.annotateSpan();
    const known = this.pinned ?? this.registry.bundles.get(this.contentHash);
    const headers: Record<string, string> = known ? { "If-None-Match": `"${this.contentHash}"` } : {};
    const response = await this.registry.request("GET", sessionPath(this.id, "bundle/"), { ...options, headers });
    if (response.status === 304 && known) return known;
    const pinned = await Bundle.fromBody(new Uint8Array(await response.arrayBuffer()));
    this.registry.bundles.put(pinned);
    return pinned;
  }

  /** Renew the lease; throws SessionEnded once the session is over. */
  async heartbeat(options: CallOptions = {}): Promise<SessionInfo> {
    if (this.offline) return this.info;
    await this.annotateSpan();
    this.info = await this.registry.json<SessionInfo>("POST", sessionPath(this.id, "heartbeat/"), options);
    return this.info;
  }

  /** Heartbeat every `interval` seconds (default a third of the lease, so two can fail before it
   * lapses) until the session ends. Timers are unref'd: they never keep a process alive. A
   * failure the retries cannot fix within the lease stops it and is kept in `keepAliveError`. */
  keepAlive(interval?: number): this {
    if (this.offline || this.keeping || this.ended) return this;
    this.keeping = true;
    const every = interval ?? Math.max(0.5, this.leaseSeconds / 3);
    const schedule = () => {
      this.keeper = setTimeout(() => {
        this.beat = (async () => {
          try {
            // Retrying longer than the lease is pointless: the session would be gone.
            this.info = await this.registry.json<SessionInfo>("POST", sessionPath(this.id, "heartbeat/"), {
              deadline: Math.max(1, this.leaseSeconds - every),
              signal: this.stopKeeper.signal,
            });
            if (this.keeping) schedule();
          } catch (exc) {
            if (this.stopKeeper.signal.aborted) return;
            this.keeping = false;
            this.keepAliveError = exc instanceof RegistryError ? exc : new RegistryError(String(exc));
            console.warn(`promptreg: keep-alive of session ${this.id} stopped: ${this.keepAliveError.message}`);
          }
        })();
      }, every * 1000);
      (this.keeper as { unref?: () => void }).unref?.();
    };
    schedule();
    return this;
  }

  /** Whether the keep-alive is running. */
  get keepingAlive(): boolean {
    return this.keeping;
  }

  private async stopKeepAlive(): Promise<void> {
    this.keeping = false;
    if (this.keeper !== null) clearTimeout(this.keeper);
    this.keeper = null;
    this.stopKeeper.abort();
    await this.beat?.catch(() => undefined);
  }

  /** End the session (idempotent) and stop the keep-alive. `outcome` (`resolved`, `escalated`,
   * `abandoned`, `failed`) and `reason`: how it went, for the version's evidence
   * (docs/api.md#evidence); another outcome than the first is refused (409). `end(options)`
   * without an outcome also works. */
  async end(outcome?: Outcome | EndOptions, options: EndOptions = {}): Promise<void> {
    if (typeof outcome === "object") [outcome, options] = [undefined, outcome];
    await this.stopKeepAlive();
    if (this.offline || this.ended) return;
    const { reason, ...call } = options;
    const json = outcome === undefined ? undefined : { outcome: { status: outcome, ...(reason === undefined ? {} : { reason }) } };
    this.info = await this.registry.json<SessionInfo>("POST", sessionPath(this.id, "end/"), { ...call, json });
    this.ended = true;
  }

  /** A named score of this session (a user's thumbs, a judge's verdict), accepted up to 7 days
   * after its end; the same `id` again is recorded once. */
  async score(name: string, value: number, options: ScoreOptions = {}): Promise<Record<string, unknown>> {
    // As in the Python client, not a call that sets the span's attributes.
    if (this.offline) throw new Unavailable("score needs the registry; this session is offline (from a snapshot).");
    const { source, comment, id, ...call } = options;
    const json: Record<string, unknown> = { name, value };
    for (const [key, given] of Object.entries({ source, comment, id })) if (given !== undefined) json[key] = given;
    return this.registry.json("POST", sessionPath(this.id, "scores/"), { ...call, json });
  }

  /** `await using`: ends the session when the block is left. When the block threw, a failure
   * to end is only logged, never masking that error (the lease ends the session anyway). The
   * language does not tell a disposer whether the block threw, so here an end that fails is
   * always logged and never thrown. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.end();
    } catch (exc) {
      console.warn(`promptreg: could not end session ${this.id} on exit: ${exc instanceof Error ? exc.message : exc}`);
    }
  }

  private async online(what: string): Promise<void> {
    if (this.offline) throw new Unavailable(`${what} needs the registry; this session is offline (from a snapshot).`);
    await this.annotateSpan();
  }

  /** Set the pinned version on the caller's active OpenTelemetry span, when @opentelemetry/api
   * is installed (`gen_ai.prompt.name`, `gen_ai.prompt.version`, `registry.content_hash`,
   * `registry.session.id`); every session call does, as in the Python client. */
  async annotateSpan(): Promise<void> {
    await annotate({ bundle: this.bundleName, version: this.version, contentHash: this.contentHash, sessionId: this.id });
  }

  /** The prompt for this turn: a byte-stable `prefix` (cacheable by `prefix_sha256`) and a
   * volatile `tail`. */
  async render(variables?: Record<string, unknown>, options: CallOptions = {}): Promise<RenderResult> {
    await this.online("render");
    const json = variables === undefined ? {} : { variables };
    return this.registry.json<RenderResult>("POST", sessionPath(this.id, "render/"), { ...options, json });
  }

  /** One call per turn: what render, route, turns and compact answer, in one request. The
   * stable prefix crosses the network once per session (and format): later calls send its hash,
   * and when the registry answers `prefix_unchanged` the held prefix is put back into the
   * answer, and with `format` the held stable part of `request` too (`request_reuse`), so the
   * answer is always whole. With `format`, `request` is the provider request body, ready to send. */
  async turn<M extends object = Message, F extends TurnFormat | undefined = undefined>(
    messages: readonly M[],
    options: TurnOptions<F> = {},
  ): Promise<TurnResult<F, M>> {
    await this.online("turn");
    const { invoked, variables, format, k, response, usage, model, ...call } = options;
    if (format !== undefined && !TURN_FORMATS.includes(format)) {
      throw new TypeError(`format must be one of ${TURN_FORMATS.join(", ")}, or absent for the neutral shape.`);
    }
    const json: Record<string, unknown> = { messages };
    if (invoked !== undefined) json["invoked"] = invoked;
    if (variables !== undefined) json["variables"] = variables;
    if (format !== undefined) json["format"] = format;
    if (k !== undefined) json["k"] = k;
    if (response !== undefined) json["response"] = response; // the previous model call's answer
    if (usage !== undefined) json["usage"] = usage;
    if (model !== undefined) json["model"] = model;
    const held = this.heldPrefix;
    // Only what can be put back may be left out: a format asked for the first time on this
    // prefix comes whole (a client cannot lay out a provider's request itself).
    if (held !== null && (format === undefined || held.requests.has(format))) json["prefix_sha256"] = held.sha256;
    // Typed loosely while it is put together; the answer is cast to the caller's types at the end.
    const answer = { ...(await this.registry.json<LooseTurn>("POST", sessionPath(this.id, "turn/"), { ...call, json })) };
    let current = held;
    if (answer.prefix_unchanged) {
      if (held === null || answer.prefix_sha256 !== held.sha256) {
        throw new IntegrityError("The registry said the prefix is unchanged, but this client holds another.");
      }
      answer.prefix = held.prefix;
    } else {
      if (held === null || held.sha256 !== answer.prefix_sha256) {
        current = { sha256: answer.prefix_sha256, prefix: answer.prefix, requests: new Map() };
      } else {
        current = { ...held, prefix: answer.prefix };
      }
      this.heldPrefix = current;
      this.prefixReceived++;
    }
    const fmt = answer["format"];
    if (typeof fmt === "string" && answer.request !== undefined && current !== null) {
      const reuse = answer["request_reuse"] as RequestReuse | undefined;
      delete answer["request_reuse"];
      if (reuse) {
        const whole = current.requests.get(fmt);
        if (whole === undefined) throw new IntegrityError(`The registry left out the stable part of a ${fmt} request this client never held.`);
        answer.request = wholeRequest(answer.request, whole, reuse);
      }
      current.requests.set(fmt, answer.request);
      // Carried once, in `request`: the caller still gets the conversation as `messages`.
      if (answer.messages === undefined) answer.messages = turnConversation(fmt as TurnFormat, answer.request, String(answer["turn_text"] ?? ""));
    }
    return answer as unknown as TurnResult<F, M>;
  }

  /** The skills to show this turn: resident, routed (with scores and why) and session ones. */
  async route(messages: Message[], options: CallOptions & { k?: number } = {}): Promise<RouteResult> {
    await this.online("route");
    const { k = 5, ...call } = options;
    return this.registry.json<RouteResult>("POST", sessionPath(this.id, "route/"), { ...call, json: { messages, k } });
  }

  /** Tell the registry which skills the model actually called in `turn`. */
  async reportTurn(turn: number, invoked: string[], options: CallOptions = {}): Promise<Record<string, unknown>> {
    await this.online("reportTurn");
    return this.registry.json("POST", sessionPath(this.id, "turns/"), { ...options, json: { turn, invoked } });
  }

  /** One of the model's file tools over the session's knowledge packs (`ls`, `glob`, `grep`,
   * `read`; params as docs/rendering.md gives them): the text for the model (at most 100 KB). */
  async fileTool(tool: "ls" | "glob" | "grep" | "read", params: Record<string, unknown> = {}, options: CallOptions = {}): Promise<string> {
    await this.online("fileTool");
    if (!["ls", "glob", "grep", "read"].includes(tool)) throw new TypeError("tool must be one of ls, glob, grep, read.");
    const query = Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined && v !== null).map(([k, v]) => [k, String(v)]));
    const answer = await this.registry.json<{ output: unknown }>("GET", sessionPath(this.id, `knowledge/${tool}`), { ...options, query });
    return String(answer.output);
  }

  /** Tier-1 micro-compaction of old tool results under the pinned policy, by the registry. */
  async compact(messages: Message[], options: CallOptions = {}): Promise<CompactResult> {
    await this.online("compact");
    return this.registry.json<CompactResult>("POST", sessionPath(this.id, "compact/"), { ...options, json: { messages } });
  }
}
