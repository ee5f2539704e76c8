"""The OpenAI Agents SDK with a pinned session: `registry_agent(session, client, tools={...})`.

The agent's model is `RegistryModel`: before every model call the Agents SDK makes, it runs the
turn call (`format="openai-responses"`) on the run's items and sends the turn's `request` with
the given `AsyncOpenAI` client, so the model sees the pinned instructions and tools unchanged
(no strict-mode rewrite of their schemas: the SDK's own tool conversion is not used for the
request), this turn's text and skill cards, and the compacted conversation. The agent's tools
are the pinned tools by name, each run by the function you give for it, plus the knowledge file
tools (`ls`, `glob`, `grep`, `read`) served by the session when the version lists packs. What
the model called in the previous step is reported as `invoked`, and the previous response as the
turn's `response` (the version's evidence).

Needs `openai-agents` (imported here only: `import promptreg` does not)."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from agents import Agent, FunctionTool, Model, ModelResponse, RunContextWrapper, Usage
from openai import AsyncOpenAI

from promptreg.aio import AsyncPinnedSession
from promptreg.messages import plain
from promptreg.step import FILE_TOOLS


class RegistryModel(Model):
    """An Agents SDK model that takes each model call as a registry turn."""

    def __init__(self, session: AsyncPinnedSession, client: AsyncOpenAI, **create: Any) -> None:
        self.session = session
        self.client = client
        self.create = create  # extra keyword arguments for responses.create (e.g. extra_headers)
        self._seen = 0  # items the previous call was given: what came after is the previous step's
        self._previous: Any = None  # the previous call's response: the next turn reports it (evidence)
        self.turns: list[dict[str, Any]] = []  # each turn call's answer, for the caller's inspection

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
        **_: Any,
    ) -> ModelResponse:
        # The agent's instructions, tools and settings are not sent: the pinned ones are, as the
        # turn call laid them out (byte-stable, so the provider's prompt cache holds).
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        invoked = None
        if self._seen:
            invoked = [i["name"] for i in _plain(items[self._seen :]) if i.get("type") == "function_call"]
        turn = await self.session.turn(items, format="openai-responses", invoked=invoked, response=self._previous)
        self._seen = len(items)
        self.turns.append(turn)
        response = await self.client.responses.create(**{**turn["request"], **self.create})
        self._previous = response
        used = response.usage
        usage = Usage(
            requests=1,
            input_tokens=used.input_tokens if used else 0,
            output_tokens=used.output_tokens if used else 0,
            total_tokens=used.total_tokens if used else 0,
        )
        return ModelResponse(output=list(response.output), usage=usage, response_id=response.id)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("RegistryModel answers Runner.run; streaming (Runner.run_streamed) is not served.")


def registry_agent(
    session: AsyncPinnedSession,
    client: AsyncOpenAI,
    *,
    tools: Mapping[str, Callable[..., Any]],
    name: str | None = None,
    **create: Any,
) -> Agent[Any]:
    """An Agent on the pinned version: its model a RegistryModel, its tools the pinned tools by
    name (each run by `tools[name](**arguments)`, sync or async, its result sent back as text)
    and the knowledge file tools when the version lists packs. A pinned tool without a function
    is a ValueError: the model would call it and get nothing."""
    pinned = session.bundle.tools
    missing = sorted(t["name"] for t in pinned if t["name"] not in tools)
    if missing:
        raise ValueError(f"No function for the pinned tool(s) {', '.join(missing)}: pass tools={{name: function}}.")
    run_tools = [
        _function_tool(t["name"], t.get("description", ""), t["input_schema"], tools[t["name"]]) for t in pinned
    ]
    if session.bundle.content.get("knowledge"):
        for tool in FILE_TOOLS:
            run_tools.append(_function_tool(tool, "", {"type": "object"}, _file_tool(session, tool)))
    return Agent(
        name=name or session.bundle.name,
        instructions=session.bundle.system_prompt,  # informative: RegistryModel sends the pinned prefix
        model=RegistryModel(session, client, **create),
        tools=list(run_tools),
    )


def _function_tool(name: str, description: str, schema: dict[str, Any], function: Callable[..., Any]) -> FunctionTool:
    async def invoke(context: RunContextWrapper[Any], arguments: str) -> str:
        result = function(**json.loads(arguments or "{}"))
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    # The schema here is what the Runner knows the tool by; the request carries the pinned one.
    return FunctionTool(
        name=name, description=description, params_json_schema=schema, on_invoke_tool=invoke, strict_json_schema=False
    )


def _file_tool(session: AsyncPinnedSession, tool: str) -> Callable[..., Any]:
    async def run(**params: Any) -> str:
        return await session.file_tool(tool, **params)

    return run


def _plain(items: list[Any]) -> list[dict[str, Any]]:
    return [i for i in (plain(item) for item in items) if isinstance(i, dict)]


__all__ = ["RegistryModel", "registry_agent"]
