"""The one ASGI application every server entry point serves (`python -m edge.serve`: make run,
the image, compose, the benchmark).

A prefix table (edge.dispatch) in front of:
  * the fast lane for the per-turn session calls (api.fastlane): it serves the paths of the
    per-turn route table (api/routes.py) itself and declines every other session path (they
    go on to Django);
  * `/mcp`: the MCP server (mcp_server.asgi): the `mcp` SDK's streamable HTTP app behind the
    API's key check. It sees the full path, and its lifespan (the SDK session manager's task
    group) is started and stopped by the dispatcher with the server's;
  * Django for everything else, run as WSGI on a fixed thread pool after the body has been
    read on the event loop (edge.django_lane).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

from config import telemetry  # noqa: E402

telemetry.setup()  # traces, when OTEL_* asks: before Django loads its middleware and database backend
django.setup()

from django.conf import settings  # noqa: E402

from api import fastlane  # noqa: E402
from edge.dispatch import Dispatcher, Route  # noqa: E402
from edge.django_lane import django_app  # noqa: E402
from mcp_server.asgi import PATH as MCP_PATH  # noqa: E402
from mcp_server.asgi import mcp_app  # noqa: E402

ROUTES: list[Route] = [
    Route("/api/v1/sessions/", fastlane.application),
    Route(MCP_PATH, mcp_app(), lifespan=True),  # the MCP server (mcp_server/): same keys, same services
]

# A worker whose event loop stops answering for WEB_WATCHDOG_SECONDS exits and granian respawns it.
application = Dispatcher(routes=ROUTES, default=django_app(), watchdog_seconds=settings.WEB_WATCHDOG_SECONDS)
