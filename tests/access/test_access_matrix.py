"""Every endpoint x every role x in-scope / out-of-scope, with the exact status.

Scoped keys (scope `support-*`) must not learn that other bundles exist: for every endpoint
and role, a bundle outside the scope answers exactly as a bundle that does not exist.

The per-turn routes are not written here: their rows are generated from the access table of
the route table (api.routes.access_table, expanded by tests/access_table.py), so a new route
is covered without a line here. tests/access/test_access_lanes.py sends the same table to both lanes
of a live server."""

from dataclasses import replace

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from api.routes import ROUTES, TurnRoute
from registry.services import bundle_create, label_move, version_publish
from sessions_app.services import session_start
from tests.access_table import SAMPLES, expected_status
from tests.conftest import Api, content

AGENT, PUBLISHER, OPS, ADMIN, CI = Role.AGENT, Role.PUBLISHER, Role.OPS, Role.ADMIN, Role.CI
LADDER = [AGENT, PUBLISHER, OPS, ADMIN]  # the hand-written rows' roles; ci is 403 unless listed
ROLES = [*LADDER, CI]
REVOKE = {"reason": "r"}


def _turn_rows(route: TurnRoute) -> list[tuple[str, str, object, dict[str, int]]]:
    """A per-turn route's rows from the access table: on the caller's own session (or a start),
    and, for a route on a session, on another key's session (404 unless ops or admin, who see
    every session in their scope; 403 first for a role the route does not admit)."""
    path = "/" + route.route.replace("<uuid:session_id>", "{own}")
    body = SAMPLES[route.name][0]
    rows = [(route.method.lower(), path, body, {role: expected_status(route, role) for role in ROLES})]
    if route.on_session:
        seen = SAMPLES[route.name][1]
        other = {
            role: 403 if expected_status(route, role) == 403 else seen if role in (OPS, ADMIN) else 404
            for role in ROLES
        }
        rows.append((route.method.lower(), path.replace("{own}", "{other}"), body, other))
    return rows


# (method, path, body, {role: status} for a bundle in scope). {b} is the bundle, {own} a
# session of the calling key, {other} a session of another key on the same bundle.
ENDPOINTS = [
    ("get", "/api/v1/bundles/{b}/", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/bundles/{b}/versions/", None, dict.fromkeys(LADDER, 200)),
    (
        "post",
        "/api/v1/bundles/{b}/versions/",
        {"content": content("new"), "message": "m"},
        {AGENT: 403, PUBLISHER: 201, OPS: 201, ADMIN: 201},
    ),
    ("get", "/api/v1/bundles/{b}/versions/1/", None, dict.fromkeys(LADDER, 200)),
    ("post", "/api/v1/bundles/{b}/versions/3/revoke/", REVOKE, {AGENT: 403, PUBLISHER: 403, OPS: 200, ADMIN: 200}),
    ("get", "/api/v1/bundles/{b}/labels/", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/bundles/{b}/labels/production/", None, dict.fromkeys(LADDER, 200)),
    (
        "put",
        "/api/v1/bundles/{b}/labels/staging/",
        {"version": 3, "reason": "r"},
        {AGENT: 403, PUBLISHER: 200, OPS: 200, ADMIN: 200},
    ),
    (
        "put",
        "/api/v1/bundles/{b}/labels/production/",
        {"version": 3, "reason": "r"},
        {AGENT: 403, PUBLISHER: 403, OPS: 200, ADMIN: 200},
    ),
    ("get", "/api/v1/bundles/{b}/labels/production/history/", None, dict.fromkeys(LADDER, 200)),
    (
        "post",
        "/api/v1/bundles/{b}/labels/production/rollback/",
        {"reason": "r"},
        {AGENT: 403, PUBLISHER: 403, OPS: 200, ADMIN: 200},
    ),
    ("get", "/api/v1/sessions/{own}/", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/sessions/{other}/", None, {AGENT: 404, PUBLISHER: 404, OPS: 200, ADMIN: 200}),
    ("get", "/api/v1/sessions/{own}/knowledge/ls", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/sessions/{other}/knowledge/ls", None, {AGENT: 404, PUBLISHER: 404, OPS: 200, ADMIN: 200}),
    *(row for route in ROUTES for row in _turn_rows(route)),
]
UNADDRESSED = [  # endpoints that name no bundle: the same for scoped and unscoped keys
    ("get", "/api/v1/bundles/", None, dict.fromkeys(LADDER, 200)),
    ("post", "/api/v1/bundles/", {"name": "support-new"}, {AGENT: 403, PUBLISHER: 201, OPS: 201, ADMIN: 201}),
    ("get", "/api/v1/catalog/", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/shell/SKILL.md", None, dict.fromkeys(LADDER, 200)),
    ("get", "/api/v1/tools/", None, dict.fromkeys(LADDER, 200)),
    ("post", "/api/v1/mcp-servers/check/", None, {AGENT: 403, PUBLISHER: 403, OPS: 200, ADMIN: 200}),
    ("get", "/api/v1/audit/", None, {AGENT: 403, PUBLISHER: 403, OPS: 200, ADMIN: 200}),
    ("get", "/api/v1/knowledge/", None, dict.fromkeys(LADDER, 200)),
    ("post", "/api/v1/knowledge/", {"name": "support-kb"}, {AGENT: 403, PUBLISHER: 201, OPS: 201, ADMIN: 201}),
]


def _ids(endpoints: list) -> list[str]:
    return [f"{method} {path}" for method, path, *_ in endpoints]


def _world(role: str, scoped: bool) -> tuple[Api, dict[str, dict[str, str]]]:
    """Two bundles (support-a in the scope, billing-b outside it), each with v1..v3,
    production v1 -> v2 (so it can roll back), staging -> v1, and sessions of the caller and
    of another key. Returns the caller and, per bundle, the path values."""
    key, secret = api_key_create(name=f"caller-{role}", role=role, scopes=["support-*"] if scoped else [], actor=SYSTEM)
    other_key, _ = api_key_create(name="other-agent", role=AGENT, actor=SYSTEM)
    caller = Api(secret, key.as_actor())
    values = {}
    for name in ("support-a", "billing-b"):
        bundle = bundle_create(name=name, actor=SYSTEM)
        versions = [
            version_publish(bundle=bundle, content=content(f"{name} {i}"), message=f"v{i}", actor=SYSTEM).version
            for i in (1, 2, 3)
        ]
        label_move(bundle=bundle, name="staging", version=versions[0], actor=SYSTEM, reason="r")
        label_move(bundle=bundle, name="production", version=versions[0], actor=SYSTEM, reason="r")
        label_move(bundle=bundle, name="production", version=versions[1], actor=SYSTEM, reason="r")
        # The caller's own session on billing-b cannot be started by its scoped key (the service
        # refuses); the same key without its scope starts it, as if the scope changed later.
        # A ci key may start none: its session is started as if by an agent key, to show that
        # holding one gives it nothing.
        own, _ = session_start(bundle=bundle, actor=replace(key.as_actor(), scopes=(), role=AGENT))
        other, _ = session_start(bundle=bundle, actor=other_key.as_actor())
        values[name] = {"b": name, "own": str(own.pk), "other": str(other.pk)}
    return caller, values


def _call(api: Api, method: str, path: str, body, values: dict[str, str]):
    path = path.format(**values)
    if isinstance(body, dict) and body.get("bundle") == "{b}":
        body = {**body, "bundle": values["b"]}
    return getattr(api, method)(path, body) if body is not None or method != "get" else api.get(path)


@pytest.mark.parametrize("scoped", [False, True], ids=["unscoped", "in-scope"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), ENDPOINTS, ids=_ids(ENDPOINTS))
def test_in_scope_and_unscoped_keys_get_the_role_status(db, scoped, role, method, path, body, expected):
    caller, values = _world(role, scoped)
    response = _call(caller, method, path, body, values["support-a"])
    assert response.status_code == expected.get(role, 403), response.content[:300]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), ENDPOINTS, ids=_ids(ENDPOINTS))
def test_out_of_scope_answers_exactly_like_not_existing(db, role, method, path, body, expected):
    caller, values = _world(role, scoped=True)
    outside = _call(caller, method, path, body, values["billing-b"])
    missing_values = {"b": "no-such-bundle", "own": values["billing-b"]["own"], "other": values["billing-b"]["other"]}
    if "{b}" not in path:  # session paths: compare with a session id that does not exist
        missing_values = {k: "00000000-0000-0000-0000-000000000000" for k in ("own", "other")} | {"b": "x"}
    missing = _call(caller, method, path, body, missing_values)
    assert outside.status_code == missing.status_code
    assert outside.json()["error"]["code"] == missing.json()["error"]["code"]
    assert outside.status_code in (403, 404)
    # 403 only where the role itself may not use the endpoint at all (it says nothing of the bundle).
    assert outside.status_code == 404 or expected.get(role, 403) == 403


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), UNADDRESSED, ids=[f"{e[0]} {e[1]}" for e in UNADDRESSED]
)
def test_endpoints_without_a_bundle_in_the_path(db, role, method, path, body, expected):
    caller, _ = _world(role, scoped=True)
    response = _call(caller, method, path, body, {})
    assert response.status_code == expected.get(role, 403)
    if response.status_code == 200 and method == "get" and path in ("/api/v1/bundles/", "/api/v1/catalog/"):
        assert [b["name"] for b in response.json()["results"]] == ["support-a"]


@pytest.mark.parametrize("name", ["billing-b", "billing-new"])
def test_a_scoped_publisher_creating_outside_its_scope_learns_nothing(db, name):
    caller, _ = _world(PUBLISHER, scoped=True)
    response = caller.post("/api/v1/bundles/", {"name": name})
    assert (response.status_code, response.json()["error"]["code"]) == (403, "permission_denied")
