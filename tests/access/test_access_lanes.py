"""Every role's key on every per-turn route (api/routes.ROUTES), on both lanes of a real
server, answers what the access table generated from the route table says (issue 36, High: a
`ci` key got agent powers through the fast lane, which answered the per-turn routes without
checking the key's role)."""

import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from django.utils import timezone

from access.actors import SYSTEM
from access.models import ApiKey
from access.roles import Role
from access.services import api_key_create
from api.routes import ROUTES, access_table
from core.ids import uuid7
from sessions_app.services import session_start
from tests.access_table import ALL_ROLES, SAMPLES, body_of, expected_status, path_of
from tests.conftest import make_api
from tests.live import web_server

pytestmark = pytest.mark.django_db(transaction=True)

LANES = {"fast": None, "django": "tests.django_lane_asgi:application"}


def test_every_route_declares_its_roles_and_has_a_sample():
    table = access_table()
    assert len(table) == len(ROUTES), "two routes share a method and path"
    for route in ROUTES:
        assert route.roles, f"{route.name} admits no role"
        assert route.roles <= set(Role), f"{route.name} declares an unknown role"
        assert route.name in SAMPLES, f"{route.name}: add a request that succeeds to tests/access_table.py"
    assert Role.CI not in set().union(*table.values()), "a ci key may only report and read checks"


def _send(base: str, method: str, path: str, secret: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {secret}"} | ({"Content-Type": "application/json"} if data else {})
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.mark.timeout(300)
def test_every_role_gets_the_table_s_answer_on_every_route_of_both_lanes(bundle, production, v1):
    keys = {role: make_api(role, name=f"lanes-{role}") for role in ALL_ROLES}
    # Used already: the fast lane then takes the batched routes through its batch (a key's
    # first use, whose last_used_at write is due, goes one by one).
    ApiKey.objects.filter(name__startswith="lanes-").update(last_used_at=timezone.now())
    got: dict[tuple[str, str, str], int] = {}
    wanted: dict[tuple[str, str, str], int] = {}
    for lane, app in LANES.items():
        with web_server(app=app) as base:
            for route in ROUTES:
                for role, api in keys.items():
                    # A session of the caller's own key (started as an agent for the roles that
                    # may not start one), fresh for each call: an end or a turn changes it.
                    session, _ = session_start(bundle=bundle, actor=replace(api.actor, role=Role.AGENT))
                    status, error = _send(
                        base, route.method, path_of(route, session.pk), api.secret, body_of(route, bundle.name)
                    )
                    got[(lane, route.name, role)] = status
                    wanted[(lane, route.name, role)] = expected_status(route, role)
                    if status == 403:
                        assert error["error"]["code"] == "permission_denied", error
    assert got == wanted


@pytest.mark.timeout(300)
def test_a_session_outside_the_key_s_scope_answers_as_no_session_on_every_route_of_both_lanes(bundle, production, v1):
    """Sessions cannot be probed (docs/api.md, Scope): a key scoped away from the session's
    bundle, ops included, gets on every per-turn route on a session (the scores too) exactly
    what a session that does not exist gets, 404 `not_found`, on both lanes; never 403."""
    owner = make_api(Role.AGENT, name="scope-owner")
    scoped = {
        role: api_key_create(name=f"scoped-{role}", role=role, scopes=["support-*"], actor=SYSTEM)[1]
        for role in (Role.AGENT, Role.OPS)
    }
    ApiKey.objects.filter(name__startswith="scoped-").update(last_used_at=timezone.now())  # the batched path too
    got: dict[tuple[str, str, str, str], tuple[int, str]] = {}
    for lane, app in LANES.items():
        with web_server(app=app) as base:
            for route in (r for r in ROUTES if r.on_session):
                for role, secret in scoped.items():
                    session, _ = session_start(bundle=bundle, actor=owner.actor)
                    for which, session_id in (("outside", session.pk), ("missing", uuid7())):
                        status, error = _send(
                            base, route.method, path_of(route, session_id), secret, body_of(route, bundle.name)
                        )
                        got[(lane, route.name, role, which)] = (status, error.get("error", {}).get("code", ""))
    assert {k[1] for k in got} >= {"scores", "end", "turn"}
    assert got == dict.fromkeys(got, (404, "not_found"))
