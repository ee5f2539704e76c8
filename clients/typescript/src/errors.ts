/**
 * Typed errors: one class per thing a caller handles differently, as in the Python client.
 * Every error the registry answers has the shape {"error": {"code", "message", "details"}};
 * `errorFromResponse` maps it to a class here, keeping status, code, message and details.
 */

export type Details = Record<string, unknown>;

export interface ErrorInit {
  status?: number | null;
  code?: string;
  details?: Details;
  retryAfter?: number | null;
}

/** Anything the registry refused or could not do. `status` is null when no answer came. */
export class RegistryError extends Error {
  readonly status: number | null;
  readonly code: string;
  readonly details: Details;

  constructor(message: string, init: ErrorInit = {}) {
    super(message);
    this.name = new.target.name;
    this.status = init.status ?? null;
    this.code = init.code ?? "";
    this.details = init.details ?? {};
  }
}

/** 400 (also 413, 415): the request breaks the contract; `details` maps each field to its messages. */
export class InvalidRequest extends RegistryError {}
/** 403: the key's role or scopes do not allow this. */
export class PermissionDenied extends RegistryError {}
/** 401: no key, or a key that is unknown, expired or revoked. */
export class NotAuthenticated extends PermissionDenied {}
/** 404: nothing there, or nothing this key may see (the registry does not tell them apart). */
export class NotFound extends RegistryError {}
/** 409: e.g. a breaking label move without allow_breaking, a drained version. */
export class Conflict extends RegistryError {}
/** 410 session_ended: the session was ended or its lease expired; start a new one. */
export class SessionEnded extends RegistryError {}

/** 410 version_revoked: the pinned version was taken out of service. `labels` ({label: version})
 * says what each label targets now, so the caller can start anew. */
export class VersionRevoked extends RegistryError {
  get labels(): Record<string, number> {
    const labels = this.details["labels"];
    return labels && typeof labels === "object" && !Array.isArray(labels) ? { ...(labels as Record<string, number>) } : {};
  }
}

/** 410 model_retired: the model the pinned version names has retired at its provider, so every
 * request the session would make fails. A VersionRevoked (start anew on a label: `labels` says
 * what each targets now); `model`, `retiresAt` and `replacement` say why. */
export class ModelRetired extends VersionRevoked {
  get model(): string | null {
    return stringDetail(this.details, "model");
  }
  get retiresAt(): string | null {
    return stringDetail(this.details, "retires_at");
  }
  get replacement(): string | null {
    return stringDetail(this.details, "replacement");
  }
}

function stringDetail(details: Details, key: string): string | null {
  const value = details[key];
  return typeof value === "string" ? value : null;
}

/** 429: over the key's rate budget; `retryAfter` in seconds (null when not given). */
export class Throttled extends RegistryError {
  readonly retryAfter: number | null;
  constructor(message: string, init: ErrorInit = {}) {
    super(message, init);
    this.retryAfter = init.retryAfter ?? null;
  }
}

/** Unreachable, or 502/503/504, still so when the retry deadline ran out. */
export class Unavailable extends RegistryError {
  readonly retryAfter: number | null;
  constructor(message: string, init: ErrorInit = {}) {
    super(message, init);
    this.retryAfter = init.retryAfter ?? null;
  }
}

/** A pinned bundle whose content does not hash to its content_hash: never used. */
export class IntegrityError extends RegistryError {}

function retryAfterOf(response: Response): number | null {
  const value = response.headers.get("Retry-After");
  if (value === null) return null;
  const seconds = Number(value);
  // An HTTP date (or garbage): the backoff schedule applies instead.
  return value.trim() !== "" && Number.isFinite(seconds) ? Math.max(0, seconds) : null;
}

/** The typed error for an answer of 400 or more (reads the body). */
export async function errorFromResponse(response: Response): Promise<RegistryError> {
  const status = response.status;
  let code = "";
  let message = "";
  let details: Details = {};
  try {
    const body: unknown = await response.json();
    const error = body && typeof body === "object" ? (body as Record<string, unknown>)["error"] : undefined;
    if (error && typeof error === "object") {
      const e = error as Record<string, unknown>;
      code = String(e["code"] ?? "");
      message = String(e["message"] ?? "");
      const found = e["details"];
      details = found && typeof found === "object" && !Array.isArray(found) ? (found as Details) : {};
    }
  } catch {
    // Not JSON (a proxy's error page): the status still says what happened.
  }
  message = message || `The registry answered ${status} ${response.statusText}.`.replace(" .", ".");
  const init: ErrorInit = { status, code, details };
  if (status === 410) {
    if (code === "model_retired") return new ModelRetired(message, init);
    return code === "version_revoked" ? new VersionRevoked(message, init) : new SessionEnded(message, init);
  }
  if (status === 429) return new Throttled(message, { ...init, retryAfter: retryAfterOf(response) });
  if (status === 502 || status === 503 || status === 504) {
    return new Unavailable(message, { ...init, retryAfter: retryAfterOf(response) });
  }
  const byStatus: Record<number, new (message: string, init: ErrorInit) => RegistryError> = {
    400: InvalidRequest,
    401: NotAuthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    415: InvalidRequest,
  };
  return new (byStatus[status] ?? RegistryError)(message, init);
}
