"""The two helpers every part of the lifecycle uses: a required free-text field, and the
content document a version stores."""

import json
from typing import Any

from core.errors import InvalidContent
from core.limits import TEXT_MAX_CHARS
from core.newlines import lf
from registry.models import BundleVersion


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
