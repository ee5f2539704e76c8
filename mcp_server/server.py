"""The MCP server over mcp_server.services: the catalog, the protocol (a pinned session), its
turns (`take_turn`: this turn's text and skill cards), the knowledge file tools the protocol
gives the model (ls, glob, grep, read, scoped to the session), the end; and one resource
template.

The pin travels as an explicit `session_id` argument, never as connection state: the server
runs stateless (a fresh transport per HTTP request), as current MCP revisions expect."""

import asyncio
import contextvars
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from django.db import InterfaceError, OperationalError, close_old_connections, connection
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from access.actors import Actor
from core.errors import DomainError
from knowledge.render import KNOWLEDGE_TOOLS
from mcp_server import services
from registry import selectors as registry_selectors
from sessions_app import rules

logger = logging.getLogger(__name__)

# Who is calling. Over HTTP the ASGI wrapper (mcp_server.asgi) authenticates the Bearer key and
# puts the Actor in the request's scope; in-process and stdio callers set this variable.
current_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("mcp_actor", default=None)
SCOPE_KEY = "registry.actor"
T = TypeVar("T")

# What each tool counts against, as its REST equivalent does (access.ratelimit: GET is a read,
# anything else a write): the catalog is GET /catalog/; a protocol starts or renders a session
# (POST /sessions/, POST .../render/); an end is POST .../end/. Anything else an MCP client
# sends (initialize, tools/list, resources/read of a bundle: GET .../versions/) is a read.
# A turn routes and renders (POST .../route/, .../render/); the file tools are GET .../knowledge/{tool}.
REST_METHOD_OF_TOOL = {
    "list_capabilities": "GET",
    "get_capability_protocol": "POST",
    "end_session": "POST",
    "take_turn": "POST",
    "ls": "GET",
    "glob": "GET",
    "grep": "GET",
    "read": "GET",
}


def rest_methods(body: bytes) -> list[str]:
    """The REST method each JSON-RPC message of a request body counts as ("GET" or "POST"),
    one per message (a batch counts each); a body that is not JSON-RPC counts as one read."""
    try:
        parsed = json.loads(body) if body else None
    except (ValueError, RecursionError):  # the SDK answers it with a parse error; deep nesting too
        return ["GET"]
    messages = parsed if isinstance(parsed, list) else [parsed]
    methods = []
    for message in messages:
        tool = None
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            tool = params.get("name") if isinstance(params, dict) else None
        methods.append(REST_METHOD_OF_TOOL.get(tool, "GET") if isinstance(tool, str) else "GET")
    return methods or ["GET"]


CATALOG_LIMIT = 500  # entries per answer; a key that sees more gets the first ones by name and a note
UNAVAILABLE = "unavailable: the registry is temporarily unavailable; say so and do not guess a process."


class Refusal(ToolError):
    """A refusal the model reads: its text starts with the contract's error code
    (`not_found: ...`), exactly as raised (RegistryServer.call_tool keeps the SDK from prefixing
    `Error executing tool <name>:`)."""


class RegistryServer(MCPServer):
    """The SDK's server, with refusals answered as docs/mcp.md promises: the contract's error
    code first. The SDK wraps every ToolError as `Error executing tool <name>: <text>`; a
    Refusal's own text is kept, and arguments that do not match a tool's input schema are a
    `validation_error` naming the fields (not their values: those are the caller's data)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, Refusal):
                text = str(cause)
            elif isinstance(cause, ValidationError):
                fields = sorted({".".join(str(part) for part in e["loc"]) or "arguments" for e in cause.errors()})
                text = f"validation_error: the arguments do not match {name}'s input schema: {', '.join(fields)}."
            elif type(error) is ToolError and str(error).startswith("Unknown tool"):
                text = f"not_found: there is no tool {name!r}."
            else:
                raise
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _actor(ctx: Context) -> Actor:
    request = getattr(ctx.request_context, "request", None)
    scope = getattr(request, "scope", None) or {}
    actor = scope.get(SCOPE_KEY) or current_actor.get()
    if actor is None:
        raise Refusal("not_authenticated: send an API key as 'Authorization: Bearer <key>'.")
    return actor


# Django's ORM is synchronous: MCP calls run it on this pool, whose few threads keep their
# database connections between calls as a Django request thread does (CONN_MAX_AGE, health
# checks), instead of connecting twice per MCP request (the key check and the tool).
POOL_SIZE = 4
_pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="mcp-django")


def _run_django(function: Callable[..., T], kwargs: dict[str, Any]) -> T:
    # Django's request cycle: drop a broken or expired connection before and after the work.
    close_old_connections()
    try:
        return function(**kwargs)
    finally:
        close_old_connections()


async def run_django(function: Callable[..., T], **kwargs: Any) -> T:
    """Run Django code on the MCP pool, in a copy of the caller's context: the MCP SDK's span of
    the call stays current there, so the session rules (core.observe) put the pinned version on
    it and the call's SQL and Redis spans are its children. (Django's database connections are
    per thread, not per context: the copy shares none.)"""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool, context.run, _run_django, function, kwargs)


def close_pool_connections() -> None:
    """Close the database connection of every pool thread (at shutdown, and after tests, whose
    database cannot be dropped while a connection is open). Each thread closes its own: the
    barrier holds every task until all threads have one, so no thread runs two."""
    barrier = threading.Barrier(POOL_SIZE, timeout=10)

    def close() -> None:
        connection.close()
        barrier.wait()

    for future in [_pool.submit(close) for _ in range(POOL_SIZE)]:
        future.result()


async def _call(function: Callable[..., T], **kwargs: Any) -> T:
    """Run a service on the pool; its refusals become tool errors the model can read."""
    try:
        return await run_django(function, **kwargs)
    except DomainError as error:
        details = f" {json.dumps(error.details, ensure_ascii=False)}" if error.details else ""
        raise Refusal(f"{error.code}: {error.message}{details}") from None
    except services.FileToolsBusy as error:
        raise Refusal(f"throttled: {error}") from None
    except (OperationalError, InterfaceError):
        logger.warning("MCP tool %s: database unavailable", function.__name__, exc_info=True)
        raise Refusal(UNAVAILABLE) from None


def _capabilities(*, actor: Actor) -> dict[str, Any]:
    """The caller's catalog: the REST catalog's selector and entry shape (GET /api/v1/catalog/)."""
    entries = list(registry_selectors.catalog(actor=actor).order_by("name")[: CATALOG_LIMIT + 1])
    found: dict[str, Any] = {"capabilities": [registry_selectors.catalog_entry(b) for b in entries[:CATALOG_LIMIT]]}
    if len(entries) > CATALOG_LIMIT:
        found["note"] = f"Only the first {CATALOG_LIMIT} capabilities by name are listed."
    return found


def build_server() -> MCPServer:
    server = RegistryServer(
        name="prompt-registry",
        title="Prompt registry",
        instructions=rules.instructions(),
        version=rules.version(),
        # No lists of resources to announce and nothing to subscribe to: bundles are immutable.
        subscriptions=False,
    )

    @server.tool(
        description=(
            "List the capabilities this API key may use: name, description, when_to_use, and the "
            "labels with their versions. Choose one by when_to_use. Reuse the list within one "
            "session only."
        ),
        annotations=ToolAnnotations.model_validate(
            {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}
        ),
    )
    async def list_capabilities(ctx: Context) -> dict[str, Any]:
        return await _call(_capabilities, actor=_actor(ctx))

    @server.tool(
        description=(
            "Fetch the protocol of a capability for this task: pins a session (on `label`, default "
            "production) and returns its system prompt, tools, guardrails, output schema, "
            "session_id, version and content_hash. Follow it strictly; never store it. To continue "
            "the same task later, pass its session_id instead of starting a new one. `per_turn` names "
            "the HTTP call that takes each turn in one request."
        ),
        annotations=ToolAnnotations.model_validate(
            {"readOnlyHint": False, "idempotentHint": False, "openWorldHint": False}
        ),
    )
    async def get_capability_protocol(
        capability: str, ctx: Context, label: str | None = None, session_id: str | None = None
    ) -> dict[str, Any]:
        protocol = await _call(
            services.protocol_fetch, actor=_actor(ctx), capability=capability, label=label, session_id=session_id
        )
        return services.protocol_as_dict(protocol)

    @server.tool(
        description="End the session of a finished task (idempotent). Its protocol must not be used again.",
        annotations=ToolAnnotations.model_validate(
            {"readOnlyHint": False, "idempotentHint": True, "openWorldHint": False}
        ),
    )
    async def end_session(session_id: str, ctx: Context) -> dict[str, Any]:
        return await _call(services.session_finish, actor=_actor(ctx), session_id=session_id)

    @server.tool(
        description=(
            "Take one turn of a session: call it with the user's latest message before you answer it. "
            "Returns `text` to read with that message (date, time, notices, and the cards of the skills "
            "for this turn) and the skills loaded. `invoked`: the skills you used in the previous turn."
        ),
        annotations=ToolAnnotations.model_validate(
            {"readOnlyHint": False, "idempotentHint": False, "openWorldHint": False}
        ),
    )
    async def take_turn(session_id: str, text: str, ctx: Context, invoked: list[str] | None = None) -> dict[str, Any]:
        turn = await _call(services.turn_take, actor=_actor(ctx), session_id=session_id, text=text, invoked=invoked)
        return services.turn_as_dict(turn)

    _file_tools(server)

    @server.resource(
        "bundle://{name}@sha256:{content_hash}",
        name="bundle",
        description="A bundle version's canonical content, by content hash: immutable, cacheable for ever.",
        mime_type="application/json",
    )
    async def bundle_resource(name: str, content_hash: str, ctx: Context) -> str:
        try:
            data = await _call(services.bundle_bytes, actor=_actor(ctx), name=name, content_hash=content_hash)
        except ToolError as error:
            raise ResourceError(str(error)) from None
        return data.decode()

    return server


SESSION_ID = "The session_id get_capability_protocol returned: the files are those of its pinned version."


def _spec(tool: str) -> dict[str, Any]:
    return next(t for t in KNOWLEDGE_TOOLS if t["name"] == tool)


def _description(tool: str) -> str:
    return f"{_spec(tool)['description']} Scoped to one session: pass its session_id."


def _param(tool: str, name: str) -> Any:
    """The parameter's description as the protocol's own tool gives it."""
    return Field(description=_spec(tool)["input_schema"]["properties"][name]["description"])


def _file_tools(server: MCPServer) -> None:
    """ls, glob, grep, read: the file tools the protocol gives the model (knowledge.render's
    KNOWLEDGE_TOOLS, same names, descriptions and parameters) with the session's id added, run
    by knowledge.tools over the packs that session's version lists, within the key's scopes."""
    read_only = ToolAnnotations.model_validate({"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})

    async def run(ctx: Context, tool: str, session_id: str, **params: Any) -> str:
        return await _call(services.file_tool, actor=_actor(ctx), session_id=session_id, tool=tool, **params)

    @server.tool(description=_description("ls"), annotations=read_only)
    async def ls(
        session_id: Annotated[str, Field(description=SESSION_ID)],
        path: Annotated[str, _param("ls", "path")],
        ctx: Context,
        offset: Annotated[int | None, _param("ls", "offset")] = None,
    ) -> str:
        return await run(ctx, "ls", session_id, path=path, offset=offset)

    @server.tool(description=_description("glob"), annotations=read_only)
    async def glob(
        session_id: Annotated[str, Field(description=SESSION_ID)],
        pattern: Annotated[str, _param("glob", "pattern")],
        ctx: Context,
        offset: Annotated[int | None, _param("glob", "offset")] = None,
    ) -> str:
        return await run(ctx, "glob", session_id, pattern=pattern, offset=offset)

    @server.tool(description=_description("grep"), annotations=read_only)
    async def grep(
        session_id: Annotated[str, Field(description=SESSION_ID)],
        pattern: Annotated[str, _param("grep", "pattern")],
        ctx: Context,
        path: Annotated[str | None, _param("grep", "path")] = None,
        offset: Annotated[int | None, _param("grep", "offset")] = None,
    ) -> str:
        return await run(ctx, "grep", session_id, pattern=pattern, path=path, offset=offset)

    @server.tool(description=_description("read"), annotations=read_only)
    async def read(
        session_id: Annotated[str, Field(description=SESSION_ID)],
        path: Annotated[str, _param("read", "path")],
        ctx: Context,
        offset: Annotated[int | None, _param("read", "offset")] = None,
        limit: Annotated[int | None, _param("read", "limit")] = None,
    ) -> str:
        return await run(ctx, "read", session_id, path=path, offset=offset, limit=limit)
