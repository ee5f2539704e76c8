"""LangChain (and LangGraph, whose nodes take and return these messages) with a pinned session:
messages in, messages out.

`registry_chat(session, model)` wraps any LangChain chat model that can `bind_tools`: each
`invoke(messages)` runs the turn call on the conversation (LangChain messages, sent in the
neutral chat shape) and invokes the model on the turn's `openai-chat` request, as LangChain
messages: the pinned system prompt first, the compacted conversation, this turn's text and
skill cards, with the pinned tools bound as they are (OpenAI function shape, their schemas
unchanged). It answers the model's `AIMessage`. What the model called since the previous
invoke is reported as `invoked`. A call of a knowledge file tool (`ls`, `glob`, `grep`,
`read`: in the pinned tools when the version lists packs) runs as `session.file_tool(name, **args)`.

Needs `langchain-core` (imported here only: `import promptreg` does not)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages, convert_to_openai_messages

from promptreg.sync import PinnedSession


class RegistryChat:
    """A chat model on a pinned session: `invoke(messages) -> AIMessage`."""

    def __init__(self, session: PinnedSession, model: BaseChatModel, **bind: Any) -> None:
        self.session = session
        self.model = model
        self.bind = bind  # extra bind_tools arguments (tool_choice=..., parallel_tool_calls=...)
        self._seen = 0  # messages the previous invoke was given: what came after is the model's step
        self.turns: list[dict[str, Any]] = []  # each turn call's answer, for the caller's inspection

    def invoke(self, messages: Sequence[BaseMessage]) -> AIMessage:
        messages = list(messages)
        invoked = None
        if self._seen:
            since = messages[self._seen :]
            invoked = [call["name"] for m in since if isinstance(m, AIMessage) for call in m.tool_calls]
        turn = self.session.turn(convert_to_openai_messages(messages), format="openai-chat", invoked=invoked)
        self._seen = len(messages)
        self.turns.append(turn)
        request = turn["request"]
        tools = request.get("tools") or []
        model: Any = self.model.bind_tools(tools, **self.bind) if tools else self.model
        reply = model.invoke(convert_to_messages(request["messages"]))
        if not isinstance(reply, AIMessage):
            raise TypeError(f"The model answered {type(reply).__name__}, not an AIMessage.")
        return reply


def registry_chat(session: PinnedSession, model: BaseChatModel, **bind: Any) -> RegistryChat:
    """`model` on the pinned session: see RegistryChat."""
    return RegistryChat(session, model, **bind)


__all__ = ["RegistryChat", "registry_chat"]
