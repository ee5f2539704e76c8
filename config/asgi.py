"""The one ASGI application every server entry point serves (`python -m config.serve`: make run,
the image, compose, the benchmark).

A prefix table (config.dispatch) in front of:
  * the fast lane for the per-turn session calls (api.fastlane): it serves
    GET .../bundle/, POST .../heartbeat/ and POST .../end/ itself and declines every
    other session path (they go on to Django);
  * `/mcp`: reserved for the MCP server (issue 13). Plug it in with one line in ROUTES:
        Route("/mcp", mcp_app, lifespan=True),
    where `mcp_app` is the `mcp` SDK's streamable HTTP (Starlette) app. It sees the full path
    (mount its endpoint at "/mcp") and its lifespan (the session manager's task group) is
    started and stopped by the dispatcher with the server's;
  * Django for everything else, run as WSGI on a fixed thread pool after the body has been
    read on the event loop (config.django_lane).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from api import fastlane  # noqa: E402
from config.dispatch import Dispatcher, Route  # noqa: E402
from config.django_lane import django_app  # noqa: E402

ROUTES: list[Route] = [
    Route("/api/v1/sessions/", fastlane.application),
    # Route("/mcp", mcp_app, lifespan=True),  # issue 13: the MCP server's streamable HTTP app
]

application = Dispatcher(routes=ROUTES, default=django_app())
