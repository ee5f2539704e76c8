"""The text routing reads of a conversation: the newest user message and the two turns before it
with their weights (skills.router, and skills.keyword_router while a version's index is not
ready)."""

from typing import Any

from skills.params import RouterParams

__all__ = ["split", "text_of"]


def text_of(message: dict[str, Any], limit: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content[:limit]
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return " ".join(parts)[:limit]
    return ""


def split(messages: list[dict[str, Any]], params: RouterParams) -> tuple[str, list[tuple[str, float]]]:
    """The newest user message, and the context: the two turns before it with their weights."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last_user is None:
        return "", []
    context: list[tuple[str, float]] = []
    users = assistants = 0
    limit, user_weights, assistant_weights = params.max_message_chars, params.context_user, params.context_assistant
    for message in reversed(messages[:last_user]):
        role = message.get("role")
        if role == "user" and users < len(user_weights):
            context.append((text_of(message, limit), user_weights[users]))
            users += 1
        elif role == "assistant" and assistants < len(assistant_weights):
            context.append((text_of(message, limit), assistant_weights[assistants]))
            assistants += 1
        if users >= len(user_weights):
            break
    return text_of(messages[last_user], limit), context
