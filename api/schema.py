"""The OpenAPI document: each operation described in its own words, and the contract's error
responses on every operation, so clients (and the schemathesis fuzz run) know every status
the API may answer with."""

import inspect
from typing import Any

from drf_spectacular import openapi

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
    "409": "conflict",
    "410": "session_ended or version_revoked",
    "413": "payload_too_large",
    "415": "unsupported_media_type",
    "429": "throttled",
    "503": "unavailable",
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


def _own_doc(obj: Any) -> str:
    """A docstring written on `obj` itself, never one inherited from a base class."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if doc else ""


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema, but an operation is described only by what was written for it:
    `extend_schema(summary=..., description=...)`, else the handler method's docstring, else its
    view class's own docstring. A base class's docstring (api.common.BaseApi's is about the
    code, not the API) is never shown to clients. The summary, when not given, is the first
    sentence of the description."""

    _own_only = False  # set while get_summary derives the summary from the written description

    def get_description(self) -> str:  # type: ignore[override]
        handler = getattr(self.view, getattr(self.view, "action", None) or self.method.lower(), None)
        written = (_own_doc(handler) if handler is not None else "") or _own_doc(type(self.view))
        if written or self._own_only:
            return written
        return self.get_summary() or ""  # only a summary was given: it is the description too

    def get_summary(self) -> str | None:
        self._own_only = True
        try:
            first = self.get_description().split("\n\n", 1)[0].replace("\n", " ").strip()
        finally:
            self._own_only = False
        return first.split(". ", 1)[0].removesuffix(".") or None
