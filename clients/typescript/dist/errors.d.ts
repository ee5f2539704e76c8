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
export declare class RegistryError extends Error {
    readonly status: number | null;
    readonly code: string;
    readonly details: Details;
    constructor(message: string, init?: ErrorInit);
}
/** 400 (also 413, 415): the request breaks the contract; `details` maps each field to its messages. */
export declare class InvalidRequest extends RegistryError {
}
/** 403: the key's role or scopes do not allow this. */
export declare class PermissionDenied extends RegistryError {
}
/** 401: no key, or a key that is unknown, expired or revoked. */
export declare class NotAuthenticated extends PermissionDenied {
}
/** 404: nothing there, or nothing this key may see (the registry does not tell them apart). */
export declare class NotFound extends RegistryError {
}
/** 409: e.g. a breaking label move without allow_breaking, a drained version. */
export declare class Conflict extends RegistryError {
}
/** 410 session_ended: the session was ended or its lease expired; start a new one. */
export declare class SessionEnded extends RegistryError {
}
/** 410 version_revoked: the pinned version was taken out of service. `labels` ({label: version})
 * says what each label targets now, so the caller can start anew. */
export declare class VersionRevoked extends RegistryError {
    get labels(): Record<string, number>;
}
/** 410 model_retired: the model the pinned version names has retired at its provider, so every
 * request the session would make fails. A VersionRevoked (start anew on a label: `labels` says
 * what each targets now); `model`, `retiresAt` and `replacement` say why. */
export declare class ModelRetired extends VersionRevoked {
    get model(): string | null;
    get retiresAt(): string | null;
    get replacement(): string | null;
}
/** 429: over the key's rate budget; `retryAfter` in seconds (null when not given). */
export declare class Throttled extends RegistryError {
    readonly retryAfter: number | null;
    constructor(message: string, init?: ErrorInit);
}
/** Unreachable, or 502/503/504, still so when the retry deadline ran out. */
export declare class Unavailable extends RegistryError {
    readonly retryAfter: number | null;
    constructor(message: string, init?: ErrorInit);
}
/** A pinned bundle whose content does not hash to its content_hash: never used. */
export declare class IntegrityError extends RegistryError {
}
/** The typed error for an answer of 400 or more (reads the body). */
export declare function errorFromResponse(response: Response): Promise<RegistryError>;
