"""`promptreg push --pin-mcp`: pin the tools a bundle declares from MCP servers (`mcp_servers`)
on the publisher's machine, where the server is reachable, before the content is sent. The
registry keeps a declared tool that `tools` already holds as it is, so it never needs to reach
the server itself. Needs the MCP SDK (`pip install 'promptreg[mcp]'`).

The mapping of an MCP tool to a content tool is the registry's (registry/mcp_servers.py,
`as_tool` and `content_pinned`), copied here: pinned here or there, a tool gets the same bytes,
so the same signature and content hash (tests/mcp_server/test_mcp_tools.py compares them)."""

from __future__ import annotations

import asyncio
from typing import Any

FIELD = "mcp_servers"


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


async def _list(url: str, timeout: float) -> list[dict[str, Any]]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tools: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout), Client(streamable_http_client(url)) as remote:
        cursor: str | None = None
        while True:
            page = await remote.list_tools(cursor=cursor)
            tools += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return tools


def list_tools(url: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The server's tools as content tools; raises on any failure (the caller says which server)."""
    return [as_tool(t) for t in asyncio.run(_list(url, timeout))]


def content_pinned(content: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`content` with each declared MCP tool that `tools` lacks listed from its server and
    appended to `tools`, and the names pinned. ValueError naming the server on a failure."""
    servers = content.get(FIELD)
    if not isinstance(servers, list):
        return content, []
    tools = list(content.get("tools") or [])
    have = {t.get("name") for t in tools if isinstance(t, dict)}
    pinned: list[str] = []
    for server in servers:
        wanted = [t for t in server.get("tools") or [] if t not in have]
        if not wanted:
            continue
        try:
            offered = {t["name"]: t for t in list_tools(server["url"])}
        except Exception as exc:  # any failure of a server we were told to reach: say which
            where = f"MCP server {server.get('name')!r} ({server.get('url')})"
            raise ValueError(f"{where} could not be listed: {exc}") from None
        missing = [t for t in wanted if t not in offered]
        if missing:
            raise ValueError(f"MCP server {server.get('name')!r} does not offer {', '.join(missing)}")
        tools += [offered[t] for t in wanted]
        have.update(wanted)
        pinned += wanted
    return ({**content, "tools": tools} if pinned else content), pinned
