"""A batch whose one group fails for a reason of its own (not an outage) re-serves only that
group's calls, one by one and without counting them again: the groups that committed keep
their answers (no session started twice, no call counted twice).

The failure is real: a trigger makes PostgreSQL refuse the INSERT of sessions on one bundle
(SQLSTATE XX000, an internal error, which is not an outage), so that bundle's start group
fails inside the database while the other groups of the same batch commit."""

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from access.models import ApiKey
from api import fastlane
from core.redis_client import redis_client
from edge.django_lane import shutdown_pool
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from sessions_app.services import session_start
from tests.conftest import content, make_api
from tests.live import asgi_scope

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_pool_connections():
    yield
    shutdown_pool()


@pytest.fixture
def refusing(ops):
    """A second bundle, `refused`, whose sessions PostgreSQL refuses to insert."""
    bundle = bundle_create(name="refused", description="Refused", actor=ops.actor)
    version = version_publish(bundle=bundle, content=content("Refused."), message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="first")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_session() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'XX000'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER test_refuse_session BEFORE INSERT ON sessions_app_session FOR EACH ROW "
            f"WHEN (NEW.bundle_id = {int(bundle.pk)}) EXECUTE FUNCTION test_refuse_session()"
        )
    yield bundle
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_refuse_session ON sessions_app_session")
        cursor.execute("DROP FUNCTION test_refuse_session()")


def _gather(requests: list[tuple[str, str, dict[str, str], bytes]]) -> list[Any]:
    """The requests through the fast lane at once (so that they batch): each one's status, or
    the exception the lane raised (the server answers that with a 500)."""

    async def one(method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await fastlane.application(asgi_scope(method, path, headers), receive, send)
        return sent[0]["status"]

    async def main() -> list[Any]:
        return await asyncio.gather(*(one(*r) for r in requests), return_exceptions=True)

    return asyncio.run(main())


def _counted(api) -> int:
    """What the key's write budget has counted (every window)."""
    store = redis_client(settings.REDIS_URL)
    return sum(int(store.get(k) or 0) for k in store.scan_iter(f"registry:rl:api-write:{api.actor.api_key_id}:*"))


def test_a_group_that_fails_is_served_again_alone_and_uncounted(bundle, production, v1, refusing):
    agent = make_api("agent", name="batch-agent")
    ApiKey.objects.filter(pk=agent.actor.api_key_id).update(last_used_at=timezone.now())
    ending, _ = session_start(bundle=bundle, actor=agent.actor)
    beating, _ = session_start(bundle=bundle, actor=agent.actor)
    json_auth = {"Authorization": f"Bearer {agent.secret}", "Content-Type": "application/json"}
    auth = {"Authorization": f"Bearer {agent.secret}"}
    requests = [
        ("POST", "/api/v1/sessions/", json_auth, b'{"bundle": "refunds"}'),
        ("POST", "/api/v1/sessions/", json_auth, b'{"bundle": "refunds"}'),
        ("POST", f"/api/v1/sessions/{ending.pk}/end/", auth, b""),
        ("POST", f"/api/v1/sessions/{beating.pk}/heartbeat/", auth, b""),
        ("POST", "/api/v1/sessions/", json_auth, b'{"bundle": "refused"}'),
        ("POST", "/api/v1/sessions/", json_auth, b'{"bundle": "refused"}'),
    ]
    sizes: list[int] = []
    real = fastlane.serve_calls

    def recording(calls):
        sizes.append(len(calls))
        return real(calls)

    fastlane.serve_calls = recording
    try:
        with override_settings(API_THROTTLE_RATES={"read": "1000/m", "write": "1000/m"}):
            before = _counted(agent)
            answers = _gather(requests)
            counted = _counted(agent) - before
    finally:
        fastlane.serve_calls = real
    assert sizes == [len(requests)], "the calls ran as one batch"
    assert answers[:4] == [201, 201, 200, 200], answers
    assert all(isinstance(a, Exception) or a >= 500 for a in answers[4:]), answers  # the refused group
    assert Session.objects.filter(bundle=bundle, api_key_id=agent.actor.api_key_id).count() == 2 + 2, (
        "each committed start once (plus the two sessions made above)"
    )
    assert not Session.objects.filter(bundle=refusing).exists()
    assert Session.objects.get(pk=ending.pk).status == "ended"
    assert counted == len(requests), f"{counted} counts for {len(requests)} calls"
