"""A local MCP server (the `mcp` package, streamable HTTP) whose tool schema a test can change:
`python tests/mcp_tool_server.py PORT VARIANT`. Variant 1 offers lookup_order(order_id) and
cancel_order(order_id); variant 2 adds a required `region` to lookup_order; variant 3 drops
cancel_order."""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings


def build(variant: int) -> MCPServer:
    server = MCPServer("orders")

    if variant == 2:

        @server.tool(description="Look an order up.")
        def lookup_order(order_id: str, region: str) -> str:
            return order_id

    else:

        @server.tool(description="Look an order up.")
        def lookup_order(order_id: str) -> str:  # type: ignore[misc]
            return order_id

    if variant != 3:

        @server.tool(description="Cancel an order.")
        def cancel_order(order_id: str) -> str:
            return order_id

    return server


if __name__ == "__main__":
    port, variant = int(sys.argv[1]), int(sys.argv[2])
    build(variant).run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
