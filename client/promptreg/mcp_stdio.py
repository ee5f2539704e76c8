"""`promptreg mcp-stdio`: an MCP server on stdin/stdout that forwards to a registry's /mcp.

For agent hosts that only speak stdio. It holds nothing of its own: the tools, their schemas,
the resource template and the instructions (the session rules) are the registry's, fetched
over streamable HTTP with the API key, and every call is forwarded as it is. Needs the `mcp`
package (`pip install 'promptreg[mcp]'`)."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


async def serve(*, url: str, api_key: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=60)
    async with Client(streamable_http_client(f"{url.rstrip('/')}/mcp", http_client=http)) as remote:
        info = remote.server_info

        async def list_tools(ctx: Any, params: Any) -> Any:
            return await remote.list_tools()

        async def call_tool(ctx: Any, params: Any) -> Any:
            return await remote.call_tool(params.name, params.arguments or {})

        async def list_templates(ctx: Any, params: Any) -> Any:
            return await remote.list_resource_templates()

        async def read_resource(ctx: Any, params: Any) -> Any:
            return await remote.read_resource(str(params.uri))

        server: Server[Any] = Server(
            info.name if info else "prompt-registry",
            version=info.version if info else "",
            instructions=remote.instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
        )
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def run(*, url: str, api_key: str) -> None:
    try:
        anyio.run(lambda: serve(url=url, api_key=api_key))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # the host shows stderr: say what failed, never the key
        print(f"promptreg mcp-stdio: cannot serve {url}/mcp: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(3) from None
