"""pydantic-ai with a pinned session: `registry_agent(session, "anthropic", tools={...})`.

The agent's model is pydantic-ai's own (`AnthropicModel`, `OpenAIChatModel`,
`OpenAIResponsesModel`) on an HTTP client whose transport runs the turn call before every model
call the agent makes (`registry_http_client`, promptreg.wire): the conversation pydantic-ai
built goes through the turn call in the request's format, and the turn's `request` is sent
instead, so the model sees the pinned system prompt and tools unchanged, this turn's text and
skill cards, and the compacted conversation. pydantic-ai reads the provider's reply as usual.
The agent's tools are the pinned tools by name, each run by the function you give for it, plus
the knowledge file tools (`ls`, `glob`, `grep`, `read`) served by the session when the version
lists packs. What the model called in the previous call is reported as `invoked`, and the
previous reply as the turn's `response` (the version's evidence).

Needs `pydantic-ai-slim[anthropic]` or `[openai]` (imported here only: `import promptreg` does
not). Takes a `PinnedSession` (then `agent.run_sync(...)`) or an `AsyncPinnedSession`."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
from pydantic_ai import Agent, Tool
from pydantic_ai.models import Model

from promptreg.aio import AsyncPinnedSession
from promptreg.step import FILE_TOOLS
from promptreg.sync import PinnedSession
from promptreg.wire import Rewriter, conversation, format_of

Session = PinnedSession | AsyncPinnedSession
FORMATS = ("anthropic", "openai-chat", "openai-responses")
# Headers of a reply that no longer hold once its body was read and decoded here.
_READ_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
ANTHROPIC_MAX_TOKENS = 4096  # what the turn's anthropic request sets when the version gives none


class RegistryTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that lays out every model call again by the session's turn call;
    other requests go through as they are. `turns` keeps each turn call's answer."""

    def __init__(self, session: Session, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.session = session
        self.inner = inner or httpx2.AsyncHTTPTransport()
        self.rewriter = Rewriter(pinned_model=_pinned_model(session))
        self.turns = self.rewriter.turns

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        fmt = format_of(request.url.path) if request.method == "POST" else None
        if fmt is None:
            return await self.inner.handle_async_request(request)
        body = json.loads(await request.aread() or b"{}")
        turn = await self._turn(conversation(fmt, body), **self.rewriter.turn_arguments(fmt, body))
        content = self.rewriter.body(body, turn)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"]
        sent = httpx2.Request(request.method, request.url, headers=headers, content=content)
        sent.extensions = request.extensions
        response = await self.inner.handle_async_request(sent)
        if body.get("stream") or response.status_code >= 400:
            self.rewriter.replied(fmt, b"")  # a stream or a refusal is not the next turn's evidence
            return response
        raw = await response.aread()  # decoded: the new response is sent on without its encoding
        self.rewriter.replied(fmt, raw)
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _READ_HEADERS]
        return httpx2.Response(response.status_code, headers=headers, content=raw, request=sent)

    async def _turn(self, messages: list[Any], **arguments: Any) -> dict[str, Any]:
        if isinstance(self.session, AsyncPinnedSession):
            return await self.session.turn(messages, **arguments)
        return await asyncio.to_thread(self.session.turn, messages, **arguments)

    async def aclose(self) -> None:
        await self.inner.aclose()


def registry_http_client(session: Session, **client: Any) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` for a pydantic-ai provider (`AnthropicProvider(http_client=...)`,
    `OpenAIProvider(http_client=...)`): its model calls go through the session's turn call."""
    return httpx2.AsyncClient(transport=RegistryTransport(session), **client)


def registry_model(session: Session, format: str, **provider: Any) -> Model:
    """pydantic-ai's model for `format` on the pinned model (or `model_name=`, when the version
    names none), its provider (configured as usual: `api_key=`, `base_url=` or the SDK's
    environment variables) on `registry_http_client`."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}.")
    given = provider.pop("model_name", None)
    name = _pinned_model(session) or given
    if not name:
        raise ValueError("The pinned version names no model: pass model_name=... (one the version allows).")
    http_client = registry_http_client(session)
    if format == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(name, provider=AnthropicProvider(http_client=http_client, **provider))
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel if format == "openai-chat" else OpenAIResponsesModel
    return model(name, provider=OpenAIProvider(http_client=http_client, **provider))


def registry_tools(session: Session, tools: Mapping[str, Callable[..., Any]]) -> list[Tool[Any]]:
    """The pinned tools by name, each run by `tools[name](**arguments)` (sync or async, its
    result sent back as text), and the knowledge file tools when the version lists packs. A
    pinned tool without a function is a ValueError: the model would call it and get nothing."""
    pinned = session.bundle.tools
    missing = sorted(t["name"] for t in pinned if t["name"] not in tools)
    if missing:
        raise ValueError(f"No function for the pinned tool(s) {', '.join(missing)}: pass tools={{name: function}}.")
    # The schemas here are what pydantic-ai knows the tools by; the request carries the pinned ones.
    out = [_tool(t["name"], t.get("description", ""), t["input_schema"], tools[t["name"]]) for t in pinned]
    if session.bundle.content.get("knowledge"):
        out += [_tool(name, "", {"type": "object"}, _file_tool(session, name)) for name in FILE_TOOLS]
    return out


def registry_agent(
    session: Session,
    format: str,
    *,
    tools: Mapping[str, Callable[..., Any]],
    **provider: Any,
) -> Agent[None, str]:
    """An Agent on the pinned version: `registry_model(session, format, **provider)`, the
    pinned tools (`registry_tools`), and the `max_tokens` the turn's request carries as its
    setting (pinned, or for Anthropic the registry's default, 4096; pydantic-ai's own default
    is the model's whole output, which it streams)."""
    limit = (session.bundle.content.get("model") or {}).get("max_tokens")
    if not isinstance(limit, int) and format == "anthropic":
        limit = ANTHROPIC_MAX_TOKENS
    settings: Any = {"max_tokens": limit} if isinstance(limit, int) else None
    return Agent(
        registry_model(session, format, **provider), tools=registry_tools(session, tools), model_settings=settings
    )


def _pinned_model(session: Session) -> str | None:
    name = (session.bundle.content.get("model") or {}).get("name")
    return name if isinstance(name, str) and name else None


def _tool(name: str, description: str, schema: dict[str, Any], function: Callable[..., Any]) -> Tool[Any]:
    async def run(**arguments: Any) -> str:
        result = function(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    return Tool.from_schema(run, name=name, description=description, json_schema=schema)


def _file_tool(session: Session, tool: str) -> Callable[..., Any]:
    async def run(**params: Any) -> str:
        if isinstance(session, AsyncPinnedSession):
            return await session.file_tool(tool, **params)
        return await asyncio.to_thread(session.file_tool, tool, **params)

    return run


__all__ = ["RegistryTransport", "registry_agent", "registry_http_client", "registry_model", "registry_tools"]
