"""Test-only ASGI app: the real application (config.asgi) with one extra path, `/__freeze`, that
holds the GIL in C on the event loop for far longer than any test runs, as a backtracking trigger
did before issue 18 (Python's re on `(a+)+$`). Served only by tests/edge/test_watchdog_live.py through
`python -m edge.serve --app tests.freeze_app:application`; production never imports it."""

import re
from typing import Any

from config.asgi import application as real

CATASTROPHIC = re.compile(r"(a+)+$")


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == "/__freeze":
        CATASTROPHIC.match("a" * 40 + "!")  # about 2^40 steps, the GIL held throughout
    await real(scope, receive, send)
