"""The per-turn access table (api.routes.access_table, generated from the routes' declared
roles) as the statuses a test expects: for each route, a request that succeeds for a role the
route admits, and 403 `permission_denied` for every other role. A route added to ROUTES without
an entry in SAMPLES fails tests/access/test_access_lanes.py::test_every_route_declares_its_roles."""

from typing import Any

from access.roles import Role
from api.routes import ROUTES, TurnRoute, access_table

ALL_ROLES: list[str] = [Role.AGENT, Role.PUBLISHER, Role.OPS, Role.ADMIN, Role.CI]

# route name -> (a body that succeeds on a fresh session of the caller's own, its status).
# "{b}" stands for the bundle's name.
SAMPLES: dict[str, tuple[Any, int]] = {
    "start": ({"bundle": "{b}"}, 201),
    "bundle": (None, 200),
    "heartbeat": (None, 200),
    "end": (None, 200),
    "render": (None, 200),
    "turn": ({"messages": [{"role": "user", "content": "refund order 42"}]}, 200),
    "scores": ({"name": "thumbs", "value": 1}, 201),
}


def expected_status(route: TurnRoute, role: str) -> int:
    """What the table says `role` gets from `route` on its own session (or a start)."""
    return SAMPLES[route.name][1] if role in access_table()[(route.method, route.route)] else 403


def path_of(route: TurnRoute, session_id: Any) -> str:
    return "/" + route.route.replace("<uuid:session_id>", str(session_id))


def body_of(route: TurnRoute, bundle_name: str) -> Any:
    body = SAMPLES[route.name][0]
    if isinstance(body, dict) and body.get("bundle") == "{b}":
        return {**body, "bundle": bundle_name}
    return body


def routes() -> list[TurnRoute]:
    return list(ROUTES)
