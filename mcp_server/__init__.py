"""The registry's MCP server (the thin shell): the per-key catalog, the per-session protocol
and immutable bundle resources, served over streamable HTTP at /mcp (config/asgi.py) with the
same API keys and the same services as the REST API. The session rules it sends as its
instructions live in sessions_app/SKILL.md (also served by the REST API)."""
