"""Typed errors: one class per thing a caller handles differently.

Every error the registry answers has the shape {"error": {"code", "message", "details"}};
`error_from_response` maps it to a class here, keeping status, code, message and details."""

from __future__ import annotations

from typing import Any

import httpx


class RegistryError(Exception):
    """Anything the registry refused or could not do. `status` is None when no answer came."""

    def __init__(
        self, message: str, *, status: int | None = None, code: str = "", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        where = f" [{self.status} {self.code}]" if self.status else ""
        return f"{self.message}{where}"


class InvalidRequest(RegistryError):
    """400: the request breaks the contract; `details` maps each field to its messages."""


class PermissionDenied(RegistryError):
    """403: the key's role or scopes do not allow this."""


class NotAuthenticated(PermissionDenied):
    """401: no key, or a key that is unknown, expired or revoked."""


class NotFound(RegistryError):
    """404: nothing there, or nothing this key may see (the registry does not tell them apart)."""


class Conflict(RegistryError):
    """409: e.g. a breaking label move without allow_breaking, a drained version."""


class SessionEnded(RegistryError):
    """410 session_ended: the session was ended or its lease expired; start a new one."""


class VersionRevoked(RegistryError):
    """410 version_revoked: ops took the pinned version out of service. `labels` ({label:
    version}) says what each label targets now, so the caller can start anew."""

    @property
    def labels(self) -> dict[str, int]:
        labels = self.details.get("labels")
        return dict(labels) if isinstance(labels, dict) else {}


class ModelRetired(VersionRevoked):
    """410 model_retired: the model the pinned version names has retired at its provider, so
    every request the session would make fails. A VersionRevoked (start anew on a label:
    `labels` says what each targets now); `model`, `retires_at` and `replacement` say why."""

    @property
    def model(self) -> str | None:
        value = self.details.get("model")
        return value if isinstance(value, str) else None

    @property
    def retires_at(self) -> str | None:
        value = self.details.get("retires_at")
        return value if isinstance(value, str) else None

    @property
    def replacement(self) -> str | None:
        value = self.details.get("replacement")
        return value if isinstance(value, str) else None


class Throttled(RegistryError):
    """429: over the key's rate budget; `retry_after` is in seconds (None when not given)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Unavailable(RegistryError):
    """The registry could not be reached or answered 502/503/504, still so when the retry
    deadline ran out. `retry_after` as the server sent it, if it did."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class IntegrityError(RegistryError):
    """A pinned bundle whose content does not hash to its content_hash: never used."""


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the backoff schedule applies instead


def error_from_response(response: httpx.Response) -> RegistryError:
    """The typed error for an answer of 400 or more."""
    status = response.status_code
    code, message = "", ""
    details: dict[str, Any] = {}
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code = str(error.get("code") or "")
            message = str(error.get("message") or "")
            found = error.get("details")
            details = found if isinstance(found, dict) else {}
    except ValueError:
        pass  # not JSON (a proxy's error page): the status still says what happened
    message = message or f"The registry answered {status} {response.reason_phrase}."
    kwargs: dict[str, Any] = {"status": status, "code": code, "details": details}
    if status == 410:
        gone = {"version_revoked": VersionRevoked, "model_retired": ModelRetired}.get(code, SessionEnded)
        return gone(message, **kwargs)
    if status == 429:
        return Throttled(message, retry_after=_retry_after(response), **kwargs)
    if status in (502, 503, 504):
        return Unavailable(message, retry_after=_retry_after(response), **kwargs)
    by_status: dict[int, type[RegistryError]] = {
        400: InvalidRequest,
        401: NotAuthenticated,
        403: PermissionDenied,
        404: NotFound,
        409: Conflict,
        413: InvalidRequest,
        415: InvalidRequest,
    }
    return by_status.get(status, RegistryError)(message, **kwargs)
