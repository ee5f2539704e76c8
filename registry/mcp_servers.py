"""`mcp_servers` in a content document: tools whose schemas come from an MCP server.

    "mcp_servers": [{"name": "orders", "url": "https://mcp.example.com/mcp", "tools": ["lookup_order"]}]

At publish (registry.services.version_publish) every declared tool that `tools` does not hold
yet is listed from its server and pinned into `tools` as an ordinary tool (name, description,
input_schema, and output_schema when the server gives one): the session sees exactly the pinned
schema, never the server's current one. A declared tool that `tools` already holds was pinned
by the publisher (e.g. from a machine where the server is reachable) and is kept as it is.
The version index records each such tool's source (VersionTool.source), which the drift check
(registry.mcp_drift) walks.

Reaching a server follows the webhooks' rules (core.urlcheck, core.transport): http(s) only, no
credentials in the URL, no private address unless WEBHOOK_ALLOW_PRIVATE_URLS, the host resolved
once and every address checked, one wall-clock deadline (WEBHOOK_ATTEMPT_DEADLINE) for the
whole listing, and a bounded answer."""

import json
import re
import time
from typing import Any

import httpx
from django.conf import settings

from core.errors import InvalidContent
from core.limits import TOOL_NAME_RE
from core.transport import PinnedTransport
from core.urlcheck import UrlNotAllowed, check_url, resolve

FIELD = "mcp_servers"
SERVERS_MAX = 10
TOOLS_PER_SERVER_MAX = 100
SERVER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
URL_MAX = 2000
# An answer larger than this is refused: a tool list, not a download.
ANSWER_MAX_BYTES = 4 * 1024 * 1024
# tools/list pages followed at most.
PAGES_MAX = 20
PROTOCOL_VERSION = "2025-06-18"


class ServerUnavailable(Exception):
    """The server could not be listed (refused address, deadline, not MCP): the message says why."""


def errors(content: dict[str, Any], *, pinned_too: bool = True) -> list[tuple[str, str]]:
    """(path, message) for every problem of `mcp_servers` (absent: none). Every declared tool
    must be in `tools` by the time the document is validated (pinned), unless `pinned_too` is
    false (the shape only: what content_pinned checks before it reaches any server)."""
    servers = content.get(FIELD)
    if servers is None:
        return []
    if not isinstance(servers, list) or len(servers) > SERVERS_MAX:
        return [(FIELD, f"A list of at most {SERVERS_MAX} servers.")]
    tools = content.get("tools")
    pinned = {t.get("name") for t in tools if isinstance(t, dict)} if isinstance(tools, list) else set()
    found: list[tuple[str, str]] = []
    names: set[str] = set()
    declared: set[str] = set()
    for i, server in enumerate(servers):
        path = f"{FIELD}[{i}]"
        if not isinstance(server, dict) or set(server) != {"name", "url", "tools"}:
            found.append((path, "An object with exactly name, url and tools."))
            continue
        found += _server_errors(path, server, names)
        if _tool_names_valid(server["tools"]):
            found += _declared_errors(path, server["tools"], declared, pinned if pinned_too else None)
        else:
            found.append((f"{path}.tools", f"1 to {TOOLS_PER_SERVER_MAX} distinct tool names."))
    return found


def _server_errors(path: str, server: dict[str, Any], names: set[str]) -> list[tuple[str, str]]:
    found = []
    name, url = server["name"], server["url"]
    if not isinstance(name, str) or not SERVER_NAME_RE.fullmatch(name) or name in names:
        found.append((f"{path}.name", f"A unique name matching {SERVER_NAME_RE.pattern}."))
    else:
        names.add(name)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > URL_MAX:
        found.append((f"{path}.url", f"An http(s) URL of at most {URL_MAX} characters."))
    return found


def _tool_names_valid(listed: Any) -> bool:
    return (
        isinstance(listed, list)
        and 1 <= len(listed) <= TOOLS_PER_SERVER_MAX
        and all(isinstance(t, str) and TOOL_NAME_RE.fullmatch(t) for t in listed)
        and len(set(listed)) == len(listed)
    )


def _declared_errors(
    path: str, listed: list[str], declared: set[str], pinned: set[Any] | None
) -> list[tuple[str, str]]:
    """Each tool declared by one server only, and (unless `pinned` is None) pinned in `tools`."""
    found = []
    for tool in listed:
        if tool in declared:
            found.append((f"{path}.tools", f"Tool {tool!r} is declared by two servers."))
        declared.add(tool)
        if pinned is not None and tool not in pinned:
            found.append((f"{path}.tools", f"Tool {tool!r} is not pinned in `tools`."))
    return found


def sources_of(doc: dict[str, Any]) -> dict[str, str]:
    """{tool name: server name} of a normalised document's MCP-sourced tools."""
    return {tool: server["name"] for server in doc.get(FIELD) or [] for tool in server["tools"]}


def content_pinned(content: object) -> object:
    """`content` with every declared MCP tool that `tools` lacks listed from its server and
    appended to `tools`; other content is returned unchanged. InvalidContent (400) naming the
    server when it cannot be listed or does not offer a declared tool."""
    if not isinstance(content, dict) or content.get(FIELD) is None:
        return content
    tools = content.get("tools", [])
    if not isinstance(tools, list) or errors(content, pinned_too=False):
        return content  # normalise_content reports what is wrong; no server is asked for it
    have = {t.get("name") for t in tools if isinstance(t, dict)}
    added: list[dict[str, Any]] = []
    for i, server in enumerate(content[FIELD]):
        wanted = [t for t in server["tools"] if t not in have]
        if not wanted:
            continue
        try:
            offered = {t["name"]: t for t in list_tools(server["url"])}
        except ServerUnavailable as exc:
            raise InvalidContent(
                f"MCP server {server.get('name')!r} could not be listed: {exc}",
                {f"content.{FIELD}[{i}].url": [f"{exc} Pin its tools in `tools` from a machine that reaches it."]},
            ) from None
        missing = [t for t in wanted if t not in offered]
        if missing:
            raise InvalidContent(
                f"MCP server {server.get('name')!r} does not offer {', '.join(missing)}.",
                {f"content.{FIELD}[{i}].tools": [f"Not offered by the server: {', '.join(missing)}."]},
            )
        added += [offered[t] for t in wanted]
        have.update(wanted)
    return {**content, "tools": [*tools, *added]} if added else content


def as_tool(listed: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (name, description, inputSchema, outputSchema?) as a content tool."""
    tool = {
        "name": listed["name"],
        "description": listed.get("description") or "",
        "input_schema": listed.get("inputSchema") or {"type": "object"},
    }
    if isinstance(listed.get("outputSchema"), dict):
        tool["output_schema"] = listed["outputSchema"]
    return tool


def list_tools(url: str) -> list[dict[str, Any]]:
    """The server's tools as content tools (as_tool), by the streamable HTTP transport:
    initialize, notifications/initialized, tools/list (following nextCursor). Raises
    ServerUnavailable."""
    deadline_seconds = float(settings.WEBHOOK_ATTEMPT_DEADLINE)
    deadline = time.monotonic() + deadline_seconds
    try:
        check_url(url)
        exchange = _Exchange(url, deadline)
        exchange.call(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "prompt-registry", "version": "1"},
            },
        )
        exchange.notify("notifications/initialized")
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(PAGES_MAX):
            result = exchange.call("tools/list", {"cursor": cursor} if cursor else {})
            page = result.get("tools")
            if not isinstance(page, list):
                raise ServerUnavailable("tools/list did not answer a list of tools.")
            tools += [as_tool(t) for t in page if isinstance(t, dict) and isinstance(t.get("name"), str)]
            cursor = result.get("nextCursor")
            if not cursor:
                return tools
        raise ServerUnavailable(f"tools/list has more than {PAGES_MAX} pages.")
    except UrlNotAllowed as exc:
        raise ServerUnavailable(str(exc)) from None
    except httpx.HTTPError as exc:
        if time.monotonic() >= deadline - 0.05:
            raise ServerUnavailable(f"The listing's deadline ({deadline_seconds:g} s) passed.") from None
        raise ServerUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from None


class _Exchange:
    """JSON-RPC over MCP's streamable HTTP, one checked connection per request (core.transport),
    every socket operation within the listing's deadline."""

    def __init__(self, url: str, deadline: float) -> None:
        self.url, self.deadline = url, deadline
        self.session_id: str | None = None
        self.next_id = 0

    def _post(self, body: dict[str, Any]) -> tuple[int, str, bytes]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "user-agent": "prompt-registry-mcp/1",
            "mcp-protocol-version": PROTOCOL_VERSION,
        }
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        resolved = resolve(self.url, timeout=max(0.1, self.deadline - time.monotonic()))
        transport = PinnedTransport(resolved, deadline=self.deadline)
        with (
            httpx.Client(transport=transport, trust_env=False, timeout=httpx.Timeout(5.0)) as client,
            client.stream("POST", self.url, content=json.dumps(body).encode(), headers=headers) as response,
        ):
            data = b""
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > ANSWER_MAX_BYTES:
                    raise ServerUnavailable(f"The answer is larger than {ANSWER_MAX_BYTES} bytes.")
                if response.headers.get("content-type", "").startswith("text/event-stream") and _answer(data, body):
                    break  # the answer arrived; the stream may stay open
            self.session_id = response.headers.get("mcp-session-id") or self.session_id
            return response.status_code, response.headers.get("content-type", ""), data

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        status, _, data = self._post(body)
        if status != 200:
            raise ServerUnavailable(f"{method} answered HTTP {status}.")
        message = _answer(data, body)
        if message is None:
            raise ServerUnavailable(f"{method} got no JSON-RPC answer.")
        if "error" in message:
            raise ServerUnavailable(f"{method} failed: {str(message['error'])[:200]}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise ServerUnavailable(f"{method} answered no result object.")
        return result

    def notify(self, method: str) -> None:
        status, _, _ = self._post({"jsonrpc": "2.0", "method": method})
        if status not in (200, 202, 204):
            raise ServerUnavailable(f"{method} answered HTTP {status}.")


def _answer(data: bytes, request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC answer to `request` in a JSON body or in a server-sent event stream."""
    text = data.decode("utf-8", errors="replace")
    candidates = (
        [text]
        if text.lstrip().startswith("{")
        else [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    )
    for candidate in candidates:
        try:
            message = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == request.get("id"):
            return message
    return None
