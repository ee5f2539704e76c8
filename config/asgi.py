"""The one ASGI application every server entry point serves (`make run`, the image, the bench).

A prefix table (config.dispatch) in front of:
  * the fast lane for the per-turn session calls (sessions_app.fastlane),
  * `/mcp`: reserved for the MCP server (issue 13); plug it in with one line in ROUTES,
    e.g. `Route("/mcp", mcp_app, lifespan=True)`, where `mcp_app` is the `mcp` SDK's
    streamable HTTP (Starlette) app: it gets the full path and its lifespan is forwarded,
  * Django for everything else, run as WSGI on a fixed thread pool after the body has been
    read on the event loop (see config.dispatch for why).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from config.dispatch import Dispatcher, Route  # noqa: E402
from config.django_lane import django_app  # noqa: E402

ROUTES: list[Route] = [
    # Route("/mcp", mcp_app, lifespan=True),  # issue 13: the MCP server's streamable HTTP app
]

application = Dispatcher(routes=ROUTES, default=django_app())
