"""The MCP server as an ASGI app for config/asgi.py's dispatcher, at /mcp on the API's host
and port: `mcp_app()` builds it.

In front of the SDK's streamable HTTP app (stateless, JSON responses) it checks what the REST
API checks before any view, in the same order: the Host header (Django's ALLOWED_HOSTS), the
HTTPS redirect (SECURE_SSL_REDIRECT: a 301, as SecurityMiddleware answers), the body (read on
the event loop within 2 MiB and WEB_BODY_TIMEOUT: 413 or 408, as the Django lane answers), the
Bearer API key (the same key check as every REST call: a revoked or expired key fails on its
next request) and the key's rate budget, counted per message as its REST equivalent counts
(mcp_server.server.rest_methods: a protocol or an end is a write). The key's Actor rides in the ASGI scope to the tools.

Lifespan: the SDK's session manager needs its task group running (`run()`), stateless mode
included. The app starts it on the server's lifespan startup when it gets one (the dispatcher
forwards it), else on the first request, in a task of its own so that the task group is
entered and left by the same task; lifespan shutdown stops it."""

import asyncio
import json
import logging
import time
from collections.abc import MutableMapping, Sequence
from typing import Any

from django.conf import settings
from mcp.server.transport_security import TransportSecuritySettings

from access.actors import Actor
from access.bearer import BearerError, bearer_lookup, bearer_secret
from access.ratelimit import api_throttle_waits, auth_failure_wait
from access.roles import Role
from access.services import api_key_authenticate
from audit.context import RequestContext, current, request_id_of, scope_client_ip
from edge.dispatch import replay
from edge.django_lane import read_body
from edge.http import edge_headers, headers_of, host_allowed, https_redirect, request_is_secure
from mcp_server.server import SCOPE_KEY, build_server, close_pool_connections, rest_methods, run_django
from metrics.access import request_logged
from metrics.instruments import request_answered

logger = logging.getLogger(__name__)
PATH = "/mcp"


def _admit(*, secret: str, client_ip: str | None, methods: list[str]) -> tuple[Actor | None, int | None]:
    """The key's Actor (None: no working key) and, when over its budget, the seconds to wait.
    Each message counts against the key's REST budget of its kind (`methods`: the REST method
    it stands for), the same counters the REST API and the fast lane use; a key that is not
    working (one lookup) counts against the client address's failed-auth budget."""
    actor = api_key_authenticate(secret=secret)
    if actor is None:
        return None, auth_failure_wait(client_ip=client_ip)
    waits = [wait for wait in api_throttle_waits(requests=[(actor, m) for m in methods]) if wait is not None]
    return actor, max(waits) if waits else None


# The JSON-RPC error code of a refusal before any tool runs (401, 403, 429): one of the codes
# JSON-RPC leaves to the server (-32000 to -32099); the contract's code leads the message.
JSONRPC_REFUSED = -32001
# Said with every 401: hosts that meet a 401 tend to start OAuth, which this server does not use.
NO_OAUTH = (
    " This server takes no OAuth: set the header in your MCP client's configuration "
    "(docs/mcp.md, Connecting: Claude Code, Claude Desktop, Cursor, the mcp SDK)."
)


def _jsonrpc_id(body: bytes) -> tuple[bool, Any]:
    """(True, its id) when `body` is one JSON-RPC request, which an MCP client reads an error of
    only in JSON-RPC's shape; (False, None) for anything else (a batch, a notification, not JSON)."""
    try:
        parsed = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(parsed, dict) or parsed.get("jsonrpc") != "2.0" or "method" not in parsed:
        return False, None
    request_id = parsed.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        return False, None
    return True, request_id


async def _error(
    send: Any,
    status: int,
    code: str,
    message: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    request: bytes = b"",
) -> None:
    """The refusal in the contract's error shape; for a JSON-RPC request (what an MCP client
    sends), as a JSON-RPC error at the same HTTP status, whose message starts with the contract's
    code and whose `data` is the contract's error object, so the host shows the reason (the
    `mcp` SDK raises it as the call's error) instead of a bare status."""
    error = {"code": code, "message": message, "details": {}}
    is_request, request_id = _jsonrpc_id(request)
    if is_request:
        rpc_error = {"code": JSONRPC_REFUSED, "message": f"{code}: {message}", "data": error}
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "error": rpc_error}
    else:
        payload = {"error": error}
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class McpApp:
    def __init__(self) -> None:
        self.server = build_server()
        self.http = self.server.streamable_http_app(
            streamable_http_path=PATH,
            json_response=True,
            stateless_http=True,
            # Host is checked below with Django's own rules; a browser page cannot use this
            # endpoint anyway without a key, so the SDK's Origin allow-list adds nothing.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._running: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    async def _run_manager(self) -> None:
        async with self.server.session_manager.run():
            self._ready.set()
            await self._stop.wait()

    async def start(self) -> None:
        if self._running is None:
            self._running = asyncio.create_task(self._run_manager())
        await self._ready.wait()

    async def stop(self) -> None:
        if self._running is not None:
            self._stop.set()
            await self._running
        await asyncio.to_thread(close_pool_connections)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = headers_of(scope)
        # What every lane does around a request (the fast lane, Django's middleware): the request
        # id (kept in the audit context, which run_django carries to the pool), the security and
        # frame headers and the request id on every answer, and the request counted in metrics.
        request_id = request_id_of(headers.get(b"x-request-id", b"").decode("latin1"))
        edge = edge_headers(request_is_secure(scope, headers), request_id)
        started, status = time.perf_counter(), 0

        async def answer(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), *edge]}
            await send(message)

        token = current.set(RequestContext(request_id=request_id, client_ip=scope_client_ip(scope)))
        try:
            await self._serve(scope, receive, answer, headers)
        finally:
            current.reset(token)
            if status:
                seconds = time.perf_counter() - started
                request_answered(route="mcp", method=scope["method"], status=status, seconds=seconds)
                # the access log's line, as the other lanes write it (the key's public prefix as
                # sent); the key is hashed for it only when the line is written
                if settings.ACCESS_LOG:
                    lookup = bearer_lookup(headers.get(b"authorization", b""))
                    request_logged("mcp", scope["method"], status, seconds, request_id, lookup[0] if lookup else "")

    async def _serve(
        self, scope: MutableMapping[str, Any], receive: Any, send: Any, headers: dict[bytes, bytes]
    ) -> None:
        if scope.get("path") != PATH:  # the dispatcher routes by prefix: /mcpx, /mcp/x are not ours
            await _error(send, 404, "not_found", "Nothing exists at this address.")
            return
        if not host_allowed(headers):
            await _error(send, 400, "validation_error", "The request is not valid (check the Host header).")
            return
        location = https_redirect(scope, headers)
        if location is not None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 301,
                    "headers": [(b"location", location.encode("latin1")), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        body = await read_body(receive, send)  # 413 or 408 answered when refused
        if body is None:
            return
        try:
            secret = bearer_secret(headers.get(b"authorization", b""))
        except BearerError as exc:
            # A key that cannot be one (not ASCII) is a key that is not valid, counted as such.
            secret = "" if exc.unusable_key else None
        if secret is None:
            await _error(
                send,
                401,
                "not_authenticated",
                "Send an API key as 'Authorization: Bearer <key>'." + NO_OAUTH,
                [(b"www-authenticate", b'Bearer realm="api"')],
                request=body,
            )
            return
        actor, wait = await run_django(
            _admit,
            secret=secret,
            client_ip=scope_client_ip(scope),
            methods=rest_methods(body),
        )
        if actor is None and wait is None:
            await _error(
                send,
                401,
                "not_authenticated",
                "The API key is not valid: it is unknown, expired or revoked." + NO_OAUTH,
                [(b"www-authenticate", b'Bearer realm="api"')],
                request=body,
            )
            return
        if wait is not None:
            retry = [(b"retry-after", str(wait).encode())]
            await _error(send, 429, "throttled", f"Too many requests; retry in {wait} s.", retry, request=body)
            return
        if actor is not None and not actor.has_role(Role.AGENT):
            # A ci key may only report checks (REST): no sessions, no catalog through MCP.
            await _error(send, 403, "permission_denied", "This key's role does not allow MCP.", request=body)
            return
        await self.start()
        scope[SCOPE_KEY] = actor
        await self.http(scope, replay(body, receive), send)


def mcp_app() -> McpApp:
    """The ASGI app to route /mcp to (config/asgi.py)."""
    return McpApp()
