"""OpenAPI post-processing: document the contract's error responses on every operation, so
clients (and the schemathesis fuzz run) know every status the API may answer with."""

from typing import Any

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}
ERRORS = {
    "400": "malformed_json or validation_error",
    "401": "not_authenticated",
    "403": "permission_denied",
    "404": "not_found",
    "405": "method_not_allowed",
    "406": "not_acceptable",
    "409": "conflict",
    "410": "session_ended or version_revoked",
    "413": "payload_too_large",
    "415": "unsupported_media_type",
    "429": "throttled",
}


def add_error_responses(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, codes in ERRORS.items():
                responses.setdefault(status, {"description": codes, "content": {"application/json": {"schema": ref}}})
    return result
