"""config.asgi without the fast lane: every request, the per-turn paths too, goes to Django
(edge.django_lane), as it does when the fast lane declines one. Served by the real server
(`python -m edge.serve --app tests.django_lane_asgi:application`) so that a live test can send
the same request to each lane (tests/access/test_access_lanes.py)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from edge.dispatch import Dispatcher  # noqa: E402
from edge.django_lane import django_app  # noqa: E402

application = Dispatcher(routes=[], default=django_app())
