"""The helpers every part of the lifecycle uses: a required free-text field, the content
document a version stores, and the model-catalog entry of the model it names."""

import json
from typing import Any

from core.errors import InvalidContent
from core.limits import TEXT_MAX_CHARS
from core.newlines import lf
from modelcatalog.selectors import content_model_name, model_get, retirement_warning
from registry.models import BundleVersion
from registry.selectors import model_retired_error

# django-simple-history keeps a move's reason in a varchar(100) (HistoricalLabel.history_change_reason);
# a reason may be up to TEXT_MAX_CHARS, kept whole in the audit log, so the history keeps its start.
HISTORY_REASON_MAX = 100


def history_reason(reason: str) -> str:
    """The reason as the label's history can hold it: whole when it fits, else cut with an ellipsis."""
    return reason if len(reason) <= HISTORY_REASON_MAX else reason[: HISTORY_REASON_MAX - 1] + "\u2026"


def require_text(field: str, value: object, *, max_chars: int = TEXT_MAX_CHARS) -> str:
    """A required free-text field (a reason, a change message): a non-blank string, returned
    with `\n` line endings (core.newlines)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidContent(f"A {field} is required.", {field: ["This field is required and may not be blank."]})
    if len(value) > max_chars:
        raise InvalidContent(f"The {field} is too long.", {field: [f"At most {max_chars} characters."]})
    return lf(value)


def content_of(version: BundleVersion) -> dict[str, Any]:
    """The content document a version stores (decoded from its canonical bytes)."""
    content: dict[str, Any] = json.loads(bytes(version.canonical))
    return content


def publish_model_check(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """The model a content document names, matched to the catalog at publish: (what the
    answer shows: {"name" as given, "catalog": the entry's provider, name, retires_at,
    replacement, or None}, warnings). A retired model is refused (400 model_retired naming the
    replacement); an unknown one, or one retiring within MODEL_RETIREMENT_WARNING, is a
    warning. The content is never rewritten (an alias stays as written)."""
    name = content_model_name(doc.get("model"))
    if name is None:
        return None, []
    info = model_get(provider=None, name=name)
    path = "content.model.name"
    if info is None:
        message = f"The model {name!r} is not in the model catalog: no retirement date or cache floor is known for it."
        return {"name": name, "catalog": None}, [{"path": path, "message": message}]
    if info.retired():
        replacement = f"; its replacement is {info.replacement}" if info.replacement else ""
        raise model_retired_error(
            info=info, message=f"The model {name!r} retired on {info.retires_at}{replacement}.", status=400
        )
    shown = {
        "name": name,
        "catalog": {
            "provider": info.provider,
            "name": info.name,
            "retires_at": info.retires_at.isoformat() if info.retires_at else None,
            "replacement": info.replacement,
        },
    }
    warnings = []
    if info.retiring_within(retirement_warning()):
        warnings.append(
            {
                "path": path,
                "message": f"The model {info.name} retires on {info.retires_at}"
                + (f"; its replacement is {info.replacement}." if info.replacement else "."),
            }
        )
    return shown, warnings
