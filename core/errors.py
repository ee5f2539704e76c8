"""Domain errors, project-wide. Services of every app raise these; api.errors turns each into
the contract's error shape {"error": {"code", "message", "details"}}."""

from typing import Any


class DomainError(Exception):
    status = 400
    code = "validation_error"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidContent(DomainError):
    """The content document or a field of a request breaks the contract; details: field -> messages."""

    status = 400
    code = "validation_error"


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Forbidden(DomainError):
    status = 403
    code = "permission_denied"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class ChecksRequired(Conflict):
    """A label's required checks have not all succeeded for the target's content hash;
    details: `version`, `content_hash`, `missing` (names never reported) and `failing`
    ([{name, status}] whose latest report is not a success)."""

    code = "checks_required"


class ApprovalsRequired(Conflict):
    """A label's required approvals do not all exist for the target's content hash; details:
    `version`, `content_hash`, `required`, `approvals` (distinct approvers so far) and `missing`."""

    code = "approvals_required"


class ChangeNotPending(Conflict):
    """The change request was decided already (applied, rejected, failed) or expired; details: `state`."""

    code = "change_not_pending"


class ChangeStale(Conflict):
    """A label the change request touches changed after it was requested; the change failed.
    details: `labels` ([{bundle, label, requested_revision, revision}])."""

    code = "change_stale"


class SessionEnded(DomainError):
    status = 410
    code = "session_ended"


class VersionRevoked(DomainError):
    status = 410
    code = "version_revoked"


class PreconditionFailed(DomainError):
    """If-Match named a state of the label that is no longer its state; details: `current`."""

    status = 412
    code = "precondition_failed"


class ModelRetired(DomainError):
    """The model a version names has retired (modelcatalog): 400 at publish, 409 at a session
    start, 410 on a call of a session already pinned to it. details: `model`, `retires_at`,
    `replacement`, and where it helps the labels' current targets."""

    code = "model_retired"

    def __init__(self, message: str, details: dict[str, Any] | None = None, *, status: int = 400) -> None:
        super().__init__(message, details)
        self.status = status


class ModelRetiring(Conflict):
    """A label move would send new sessions to a version whose model retires within
    MODEL_RETIREMENT_WARNING; repeat with allow_retiring (the reason is kept in the history).
    details: `versions` ([{version, model, retires_at, replacement}])."""

    code = "model_retiring"
