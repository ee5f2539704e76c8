"""A bundle's strict conversation setting (Bundle.strict_conversation, issue 36): what the
turn call and session start refuse for a bundle whose ops switched it on. Off (the default),
the conversation's `system` and `developer` messages go into the OpenAI formats' request as
they came and session string variables go into the system prompt verbatim (docs/api.md)."""

from typing import Any

from core.errors import InvalidContent

REFUSED_ROLES = ("system", "developer")
# A strict bundle's session string variable: a name, a team, a locale, not a paragraph.
STRICT_VALUE_MAX_CHARS = 200


def strict_conversation(bundle_id: int) -> bool:
    """Whether the bundle refuses system/developer messages and long or multi-line values (one
    primary-key read: the session read on the hot path does not carry the bundle's settings)."""
    from registry.models import Bundle

    return bool(Bundle.objects.filter(pk=bundle_id).values_list("strict_conversation", flat=True).first())


def check_messages(messages: list[Any]) -> None:
    """InvalidContent naming each message whose role only the pinned prompt may have."""
    wrong = {
        f"messages[{i}].role": [f"This bundle refuses {m.get('role')!r} messages in the conversation."]
        for i, m in enumerate(messages)
        if isinstance(m, dict) and m.get("role") in REFUSED_ROLES
    }
    if wrong:
        raise InvalidContent(
            "This bundle takes its system prompt from the registry only: send user, assistant and tool messages.",
            dict(list(wrong.items())[:20]),
        )


def check_variables(values: dict[str, Any]) -> None:
    """InvalidContent for a string value that could rewrite the prompt around it: longer than
    STRICT_VALUE_MAX_CHARS, a line break or other control character, or template braces."""
    errors: dict[str, list[str]] = {}
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        if len(value) > STRICT_VALUE_MAX_CHARS:
            errors[f"variables.{name}"] = [f"At most {STRICT_VALUE_MAX_CHARS} characters for this bundle."]
        elif any(ord(c) < 32 or ord(c) == 127 for c in value) or "\u2028" in value or "\u2029" in value:
            errors[f"variables.{name}"] = ["One line of text, without control characters, for this bundle."]
        elif "{{" in value or "}}" in value:
            errors[f"variables.{name}"] = ["No template braces ({{ or }}) for this bundle."]
    if errors:
        raise InvalidContent("A session variable is not allowed for this bundle; see details.", errors)
