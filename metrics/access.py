"""The access log: one line per request, from every HTTP lane (the Django middleware, the fast
lane and /mcp call `request_logged`), with its route (the URL pattern, never the path with its ids),
method, status, duration, request id, key prefix and session. On by default with
LOG_FORMAT=json, off with ACCESS_LOG=0 (settings.ACCESS_LOG); in the JSON format its fields are
top-level keys of the line (config.logformat merges `access`)."""

import logging

from django.conf import settings

logger = logging.getLogger("registry.access")


def request_logged(
    route: str,
    method: str,
    status: int,
    seconds: float,
    request_id: str,
    key_prefix: str = "",
    session_id: str = "",
) -> None:
    if not settings.ACCESS_LOG:
        return
    access: dict[str, object] = {
        "route": route,
        "method": method,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "request_id": request_id,
    }
    if key_prefix:
        access["key_prefix"] = key_prefix
    if session_id:
        access["session_id"] = session_id
    logger.info("%s %s %s %.1f ms", method, route, status, seconds * 1000, extra={"access": access})
