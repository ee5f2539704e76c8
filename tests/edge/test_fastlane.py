"""The fast lane (api.fastlane) answers exactly what Django answers for the per-turn calls, and
serves nothing stale: checked in process against Django's path, and across two real server
processes (python -m edge.serve) for revoked and expired keys, ended and expired sessions
and revoked versions."""

import asyncio
import json
import urllib.error
import urllib.request
import uuid
import zoneinfo
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer

from access.actors import SYSTEM
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke
from api import fastlane
from api.views.sessions import SessionIn, SessionOut, session_in, session_out
from edge.dispatch import Decline
from edge.django_lane import django_app, shutdown_pool
from registry.models import Bundle, BundleVersion
from registry.services import bundle_create, label_move, version_publish, version_revoke
from sessions_app.models import Session
from sessions_app.services import session_end, session_start
from tests.conftest import content, make_api, pinned_body
from tests.live import asgi_scope, web_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_pool_connections():
    yield
    shutdown_pool()  # the pool threads' connections would keep the test database from being dropped


IGNORED = {b"x-request-id", b"date", b"server"}


def _run(
    app, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(asgi_scope(method, path, headers), receive, send))
    headers_out = {k: v for k, v in sent[0]["headers"] if k not in IGNORED}
    return sent[0]["status"], headers_out, b"".join(m.get("body", b"") for m in sent[1:])


_django = None


def both(method: str, path: str, secret: str, body: bytes = b"", **headers: str):
    """(fast lane's answer, Django's answer) for the same request; fails if the lane declines."""
    global _django
    _django = _django or django_app()
    headers = {"Authorization": f"Bearer {secret}", **headers}
    try:
        fast = _run(fastlane.application, method, path, headers, body)
    except Decline:
        pytest.fail(f"the fast lane declined {method} {path}")
    return fast, _run(_django, method, path, headers, body)


def _same(fast, slow, *, volatile: tuple[str, ...] = ()) -> None:
    assert fast[0] == slow[0]
    assert fast[1] == slow[1], "headers differ"
    if volatile:
        a, b = json.loads(fast[2]), json.loads(slow[2])
        for name in volatile:
            a.pop(name), b.pop(name)
        assert a == b
    else:
        assert fast[2] == slow[2]


def test_it_answers_fetch_304_and_heartbeat_as_django_does(bundle, production, v1, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    path = f"/api/v1/sessions/{session.pk}/"
    fast, slow = both("GET", path + "bundle/", agent.secret)
    _same(fast, slow)
    assert fast[0] == 200 and fast[2] == pinned_body(v1)
    assert fast[1][b"etag"] == f'"{v1.content_hash}"'.encode()

    _same(*both("GET", path + "bundle/", agent.secret, **{"If-None-Match": f'"{v1.content_hash}"'}))
    fast, slow = both("POST", path + "heartbeat/", agent.secret)
    _same(fast, slow, volatile=("last_seen_at", "expires_at"))
    assert fast[0] == 200

    # The fast lane ends it; Django then answers the ended session: the same bytes.
    fast, slow = both("POST", path + "end/", agent.secret)
    _same(fast, slow)
    assert json.loads(fast[2])["status"] == "ended"
    assert Session.objects.get(pk=session.pk).status == "ended"


def test_it_answers_the_errors_as_django_does(bundle, production, v1, v2, agent, ops):
    other = make_api("agent", name="someone-else")
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    path = f"/api/v1/sessions/{session.pk}/bundle/"
    _same(*both("GET", "/api/v1/sessions/00000000-0000-0000-0000-000000000000/bundle/", agent.secret))
    _same(*both("GET", path, other.secret))  # another key's session: 404

    with override_settings(API_THROTTLE_RATES={"read": "1/m", "write": "1/m"}):
        throttled = make_api("agent", name="throttled")
        mine, _ = session_start(bundle=bundle, actor=throttled.actor)
        fast, slow = both("GET", f"/api/v1/sessions/{mine.pk}/bundle/", throttled.secret)
        assert (fast[0], slow[0]) == (200, 429), "the first call spent the budget"
        fast, slow = both("GET", f"/api/v1/sessions/{mine.pk}/bundle/", throttled.secret)
        _same(fast, slow)
        assert fast[0] == 429 and b"retry-after" in fast[1]

    session_end(session=session, actor=agent.actor)
    fast, slow = both("GET", path, agent.secret)
    _same(fast, slow)
    assert json.loads(fast[2])["error"]["code"] == "session_ended"

    revoked, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    version_revoke(version=v1, actor=ops.actor, reason="leaks")
    fast, slow = both("GET", f"/api/v1/sessions/{revoked.pk}/bundle/", agent.secret)
    _same(fast, slow)
    assert json.loads(fast[2])["error"]["code"] == "version_revoked"


SESSION_TIMES = ("id", "started_at", "last_seen_at", "expires_at")


def test_it_starts_sessions_and_refuses_bad_starts_as_django_does(bundle, production, v1, agent):
    json_type = {"Content-Type": "application/json"}
    fast, slow = both("POST", "/api/v1/sessions/", agent.secret, b'{"bundle": "refunds"}', **json_type)
    _same(fast, slow, volatile=SESSION_TIMES)
    assert fast[0] == 201 and json.loads(fast[2])["version"] == v1.number
    assert Session.objects.filter(bundle=bundle).count() == 2

    again = b'{"bundle": "refunds", "external_id": "conversation-7"}'
    assert (
        _run(
            fastlane.application,
            "POST",
            "/api/v1/sessions/",
            {"Authorization": f"Bearer {agent.secret}", **json_type},
            again,
        )[0]
        == 201
    )
    fast, slow = both("POST", "/api/v1/sessions/", agent.secret, again, **json_type)
    _same(fast, slow)
    assert fast[0] == 200, "the same external_id answers the session it started"

    for body in [
        b'{"bundle": "refunds"',  # malformed JSON
        b"[1, 2]",
        b'{"bundle": "nope"}',
        b'{"bundle": "refunds", "label": "staging"}',
        b'{"bundle": "refunds", "ttl_seconds": 0}',
        b'{"bundle": "refunds", "version": 99}',
        b'{"bundle": "refunds", "label": "production", "version": 1}',
        b'{"bundle": "refunds", "surprise": "\\ud800"}',
    ]:
        fast, slow = both("POST", "/api/v1/sessions/", agent.secret, body, **json_type)
        _same(fast, slow)
        assert 400 <= fast[0] < 500, body


def test_it_refuses_a_start_outside_the_keys_scope_as_django_does(bundle, production, v1):
    key, secret = api_key_create(name="scoped", role="agent", scopes=["billing-*"], actor=SYSTEM)
    body = b'{"bundle": "refunds"}'
    fast, slow = both("POST", "/api/v1/sessions/", secret, body, **{"Content-Type": "application/json"})
    _same(fast, slow)
    assert fast[0] == 404, "the bundle exists, but not for this key"
    assert not Session.objects.filter(api_key=key).exists()


def test_session_out_renders_what_the_serializer_renders():
    """The fast lane's SessionOut (api.views.sessions.session_out), byte for byte, on the cases a
    comparison through both paths does not reach: no label, an external id, a lease run out,
    an end, times without microseconds or in another zone, variables with U+2028."""
    now = timezone.now()
    paris = now.astimezone(zoneinfo.ZoneInfo("Europe/Paris")).replace(microsecond=0)
    version = BundleVersion(id=2, bundle_id=1, number=3, content_hash="ab" * 32)
    base = {"bundle": Bundle(id=1, name="refunds"), "version": version, "ttl_seconds": 60, "last_seen_at": now}
    sessions = [
        Session(**base, id=uuid.uuid4(), label="production", started_at=now, expires_at=now + timedelta(seconds=60)),
        Session(
            **base,
            id=uuid.uuid4(),
            label=None,
            external_id="conversation \u2028 7",
            started_at=paris,
            expires_at=now - timedelta(seconds=1),
            variables={"timezone": "Europe/Paris", "n": [1, 2.5, None, True], "é": "\u2029"},
        ),
        Session(
            **base, id=uuid.uuid4(), label="canary", status="ended", started_at=now, expires_at=now, ended_at=paris
        ),
    ]
    for session in sessions:
        assert JSONRenderer().render(session_out(session)) == JSONRenderer().render(SessionOut(session).data)


@pytest.mark.parametrize(
    "data",
    [
        {"bundle": "refunds"},
        {"bundle": "refunds", "label": None, "version": 2, "external_id": "c-7", "ttl_seconds": 60},
        {"bundle": "refunds", "routing_key": "u" * 200, "variables": [1, {"a": None}]},
        {"bundle": "r" * 100, "ttl_seconds": 604_800, "version": 2**63 - 1},
        {"bundle": "r" * 101},
        {"bundle": ""},
        {"bundle": None},
        {"label": "production"},
        {"bundle": "refunds", "external_id": "a\x00b"},
        {"bundle": "refunds", "external_id": "\ud800"},
        {"bundle": "refunds", "version": True},
        {"bundle": "refunds", "version": 0},
        {"bundle": "refunds", "version": 2.0},
        {"bundle": "refunds", "version": 2**63},
        {"bundle": "refunds", "ttl_seconds": 604_801},
        {"bundle": "refunds", "surprise": 1},
        {"bundle": 7},
        [1, 2],
        "refunds",
    ],
)
def test_session_in_validates_what_the_serializer_validates(data):
    """The fast lane's SessionIn (api.views.sessions.session_in) accepts exactly what the
    serializer accepts, with the same data, and leaves every refusal to the serializer."""

    def outcome(validate):
        try:
            return dict(validate())
        except ValidationError as exc:
            return exc.detail

    def serializer():
        checked = SessionIn(data=data)
        checked.is_valid(raise_exception=True)
        return checked.validated_data

    assert outcome(lambda: session_in(data)) == outcome(serializer)


def test_it_leaves_what_it_does_not_serve_to_django(bundle, production, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    path = f"/api/v1/sessions/{session.pk}/bundle/"
    for method, where, headers in [
        ("GET", path, {}),  # no key: Django's 401
        ("GET", path, {"Authorization": "Bearer pr_not-a-key"}),
        ("POST", path, {"Authorization": f"Bearer {agent.secret}"}),  # Django's 405
        ("GET", f"/api/v1/sessions/{session.pk}/", {"Authorization": f"Bearer {agent.secret}"}),
        ("POST", f"/api/v1/sessions/{session.pk}/route/", {"Authorization": f"Bearer {agent.secret}"}),
        ("GET", path.upper(), {"Authorization": f"Bearer {agent.secret}"}),
        ("POST", "/api/v1/sessions/", {"Authorization": f"Bearer {agent.secret}", "Content-Type": "text/plain"}),
        ("POST", "/api/v1/sessions/", {"Content-Type": "application/json"}),
    ]:
        with pytest.raises(Decline):
            _run(fastlane.application, method, where, headers)


# --- two real server processes ----------------------------------------------------------------


def _get(base: str, path: str, secret: str) -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.timeout(180)
def test_nothing_is_stale_on_any_of_two_server_processes(bundle, production, v1, v2, agent, ops):
    """Each step changes the database once (through the services, as the API or the admin
    would), and the very next request on each of two servers sees it."""
    pinned, _ = session_start(bundle=bundle, actor=agent.actor)
    ending, _ = session_start(bundle=bundle, actor=agent.actor)
    lapsing, _ = session_start(bundle=bundle, actor=agent.actor)
    short = make_api("agent", name="short-lived")
    short_session, _ = session_start(bundle=bundle, actor=short.actor)
    with web_server() as a, web_server() as b:
        servers = (a, b)
        fetch = "/api/v1/sessions/{}/bundle/"
        for base in servers:
            for session in (pinned, ending, lapsing):
                assert _get(base, fetch.format(session.pk), agent.secret) == (200, pinned_body(v1))
            assert _get(base, fetch.format(short_session.pk), short.secret)[0] == 200

        # A label move changes nothing for a pinned session.
        label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
        for base in servers:
            assert _get(base, fetch.format(pinned.pk), agent.secret) == (200, pinned_body(v1))

        # Ended and expired sessions: 410 at once, on both.
        session_end(session=ending, actor=agent.actor)
        Session.objects.filter(pk=lapsing.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        for base in servers:
            for session in (ending, lapsing):
                status, body = _get(base, fetch.format(session.pk), agent.secret)
                assert (status, json.loads(body)["error"]["code"]) == (410, "session_ended")

        # An expired key and a revoked key: 401 at once, on both.
        ApiKey.objects.filter(name="short-lived").update(expires_at=timezone.now() - timedelta(seconds=1))
        for base in servers:
            assert _get(base, fetch.format(short_session.pk), short.secret)[0] == 401

        # A revoked version: 410 at once, on both.
        version_revoke(version=v1, actor=ops.actor, reason="leaks")
        for base in servers:
            status, body = _get(base, fetch.format(pinned.pk), agent.secret)
            assert (status, json.loads(body)["error"]["code"]) == (410, "version_revoked")

        new, _ = session_start(bundle=bundle, actor=agent.actor)
        api_key_revoke(key=ApiKey.objects.get(pk=agent.actor.api_key_id), actor=SYSTEM)
        for base in servers:
            assert _get(base, fetch.format(new.pk), agent.secret)[0] == 401


def test_a_new_version_is_served_by_a_process_that_cached_the_old_bytes(bundle, production, v1, agent, ops):
    """The per-process bytes are keyed by content hash: a session on a new version gets the new
    bytes from a process that has served the old ones."""
    old, _ = session_start(bundle=bundle, actor=agent.actor)
    with web_server() as base:
        assert _get(base, f"/api/v1/sessions/{old.pk}/bundle/", agent.secret) == (200, pinned_body(v1))
        v3 = version_publish(bundle=bundle, content=content("Three."), message="v3", actor=ops.actor).version
        label_move(bundle=bundle, name="production", version=v3, actor=ops.actor, reason="ship v3")
        new, _ = session_start(bundle=bundle, actor=agent.actor)
        assert _get(base, f"/api/v1/sessions/{new.pk}/bundle/", agent.secret) == (200, pinned_body(v3))
        assert _get(base, f"/api/v1/sessions/{old.pk}/bundle/", agent.secret) == (200, pinned_body(v1))


# --- the batched calls ------------------------------------------------------------------------


def _gather(requests: list[tuple[str, str, dict[str, str]]]) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Run the requests through the fast lane at once, on one event loop, so that they batch."""

    async def one(method: str, path: str, headers: dict[str, str]):
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await fastlane.application(asgi_scope(method, path, headers), receive, send)
        return sent[0]["status"], {k: v for k, v in sent[0]["headers"] if k not in IGNORED}, sent[1]["body"]

    async def main():
        return await asyncio.gather(*(one(*request) for request in requests))

    return asyncio.run(main())


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """The size of every batch the fast lane runs (serve_calls itself still runs)."""
    sizes: list[int] = []
    real = fastlane.serve_calls

    def recording(calls):
        sizes.append(len(calls))
        return real(calls)

    monkeypatch.setattr(fastlane, "serve_calls", recording)
    return sizes


def _used(*apis) -> None:
    # A key's first use writes last_used_at, which the one-by-one path does: mark them used.
    ApiKey.objects.filter(pk__in=[api.actor.api_key_id for api in apis]).update(last_used_at=timezone.now())


def test_batched_calls_answer_what_django_answers(bundle, production, v1, v2, agent, ops, batches):
    """Fetches, revalidations and heartbeats run together: the plain ones in one batch, the
    others (another key's session, an ended session, a revoked version, no such session) sent on
    one by one; every answer is Django's, to the byte."""
    other = make_api("agent", name="someone-else")
    _used(agent, other, ops)
    sessions = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(6)]
    ended, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end(session=ended, actor=agent.actor)
    revoked, _ = session_start(bundle=bundle, actor=agent.actor)
    auth = {"Authorization": f"Bearer {agent.secret}"}
    inm = {**auth, "If-None-Match": f'"{v1.content_hash}"'}
    requests = [
        ("GET", f"/api/v1/sessions/{sessions[0].pk}/bundle/", auth),
        ("GET", f"/api/v1/sessions/{sessions[1].pk}/bundle/", inm),
        ("POST", f"/api/v1/sessions/{sessions[2].pk}/heartbeat/", auth),
        ("GET", f"/api/v1/sessions/{sessions[3].pk}/bundle/", {"Authorization": f"Bearer {other.secret}"}),
        ("GET", f"/api/v1/sessions/{sessions[4].pk}/bundle/", {"Authorization": f"Bearer {ops.secret}"}),
        ("GET", f"/api/v1/sessions/{ended.pk}/bundle/", auth),
        ("POST", f"/api/v1/sessions/{ended.pk}/heartbeat/", auth),
        ("GET", "/api/v1/sessions/00000000-0000-0000-0000-000000000000/bundle/", auth),
        ("GET", f"/api/v1/sessions/{revoked.pk}/bundle/", auth),
        ("POST", f"/api/v1/sessions/{sessions[5].pk}/heartbeat/", auth),
    ]
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    version_revoke(version=v1, actor=ops.actor, reason="leaks")  # every session above is on v1
    revived = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(3)]  # on v2
    inm2 = {**auth, "If-None-Match": f'"{v2.content_hash}"'}
    requests[0] = ("GET", f"/api/v1/sessions/{revived[0].pk}/bundle/", auth)
    requests[1] = ("GET", f"/api/v1/sessions/{revived[1].pk}/bundle/", inm2)
    requests[2] = ("POST", f"/api/v1/sessions/{revived[2].pk}/heartbeat/", auth)
    requests[4] = ("GET", f"/api/v1/sessions/{revived[0].pk}/bundle/", {"Authorization": f"Bearer {ops.secret}"})

    fast = _gather(requests)
    # The fetches in one batch, the heartbeats (their empty bodies read first) in the next.
    assert sum(batches) == len(requests) and len(batches) <= 2, batches
    global _django
    _django = _django or django_app()
    for (method, path, headers), answer in zip(requests, fast, strict=True):
        slow = _run(_django, method, path, headers)
        _same(answer, slow, volatile=("last_seen_at", "expires_at") if answer[0] == 200 and "heartbeat" in path else ())
    statuses = [answer[0] for answer in fast]
    assert statuses == [200, 304, 200, 404, 200, 410, 410, 404, 410, 410]
    assert fast[0][2] == pinned_body(v2)


def test_a_batched_heartbeat_renews_the_lease(bundle, production, v1, agent, batches):
    _used(agent)
    sessions = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(4)]
    Session.objects.filter(pk__in=[s.pk for s in sessions]).update(
        last_seen_at=timezone.now() - timedelta(seconds=600), expires_at=timezone.now() + timedelta(seconds=60)
    )
    before = timezone.now()
    answers = _gather(
        [("POST", f"/api/v1/sessions/{s.pk}/heartbeat/", {"Authorization": f"Bearer {agent.secret}"}) for s in sessions]
    )
    assert sum(batches) == 4 and len(batches) <= 2, batches
    for session, (status, _, body) in zip(sessions, answers, strict=True):
        stored = Session.objects.get(pk=session.pk)
        assert status == 200 and stored.last_seen_at >= before
        assert stored.expires_at == stored.last_seen_at + timedelta(seconds=stored.ttl_seconds)
        assert json.loads(body)["expires_at"] == stored.expires_at.isoformat().replace("+00:00", "Z")


def test_a_batch_counts_every_call_against_the_budget(bundle, production, v1, agent, batches):
    """Twelve fetches and heartbeats of one key in one batch against 5 reads and 2 writes a
    minute: the first five reads and the first two writes pass, in order, the rest are 429."""
    _used(agent)
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    auth = {"Authorization": f"Bearer {agent.secret}"}
    read = ("GET", f"/api/v1/sessions/{session.pk}/bundle/", auth)
    write = ("POST", f"/api/v1/sessions/{session.pk}/heartbeat/", auth)
    with override_settings(API_THROTTLE_RATES={"read": "5/m", "write": "2/m"}):
        answers = _gather([read] * 8 + [write] * 4)
    assert sum(batches) == 12 and len(batches) <= 2, batches
    assert [a[0] for a in answers] == [200] * 5 + [429] * 3 + [200] * 2 + [429] * 2
    assert all(b"retry-after" in a[1] for a in answers if a[0] == 429)


def test_batched_lease_renewals_do_not_deadlock(bundle, production, v1, agent):
    """Two web processes' batches renew the same sessions, listed in opposite orders, at once:
    the rows are locked in id order, so neither waits for the other in a cycle."""
    import threading

    from django.db import connection

    from sessions_app.services import sessions_renew

    ids = [str(session_start(bundle=bundle, actor=agent.actor)[0].pk) for _ in range(40)]
    errors: list[BaseException] = []

    def renew(order: list[str]) -> None:
        try:
            for _ in range(15):
                assert len(sessions_renew(session_ids=order)) == len(order)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=renew, args=(order,)) for order in (ids, ids[::-1], ids[::2] + ids[1::2])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


def test_batched_ends_answer_what_django_answers(bundle, production, v1, v2, agent, ops, batches, monkeypatch):
    """Ends by their own key in one statement; an ended session, another key's session and an
    end by ops go one by one. Django, asked to end them again afterwards, answers the stored
    session: the same bytes. The draining version gets one drain request, the live one none."""
    from registry import lifecycle

    asked: list[int] = []
    monkeypatch.setattr(lifecycle, "enqueue_version_drain", asked.append)
    other = make_api("agent", name="someone-else")
    _used(agent, other, ops)
    on_v1 = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(3)]
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")  # v1 drains
    asked.clear()  # the move's own request
    on_v2 = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(3)]
    ended, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end(session=ended, actor=agent.actor)
    auth = {"Authorization": f"Bearer {agent.secret}"}
    requests = [("POST", f"/api/v1/sessions/{s.pk}/end/", auth) for s in on_v1 + on_v2[:2]]
    requests += [
        ("POST", f"/api/v1/sessions/{ended.pk}/end/", auth),
        ("POST", f"/api/v1/sessions/{on_v2[2].pk}/end/", {"Authorization": f"Bearer {other.secret}"}),
        ("POST", f"/api/v1/sessions/{on_v2[2].pk}/end/", {"Authorization": f"Bearer {ops.secret}"}),
    ]
    fast = _gather(requests)
    assert sum(batches) == len(requests), batches
    global _django
    _django = _django or django_app()
    for (method, path, headers), answer in zip(requests, fast, strict=True):
        _same(answer, _run(_django, method, path, headers))
    assert [a[0] for a in fast] == [200] * 6 + [404, 200]
    assert all(json.loads(a[2])["status"] == "ended" for a in fast if a[0] == 200)
    assert Session.objects.filter(bundle=bundle, status="active").count() == 0
    assert asked == [v1.pk], "one drain request, for the draining version only"


def test_batched_starts_answer_what_django_answers(bundle, production, v1, v2, agent, ops, batches):
    """Plain starts of two keys in one batch: one transaction, each answered as Django answers
    the same body (but for the new id and times); a start on a missing label gets the same 404
    as each of its batch; starts with an external_id or variables, and a malformed body, go one
    by one. A split label pins each routing key where the one-by-one start pins it."""
    other = make_api("agent", name="someone-else")
    _used(agent, other)
    label_move(bundle=bundle, name="canary", targets=[(v1, 50), (v2, 50)], actor=ops.actor, reason="split")
    json_auth = {"Authorization": f"Bearer {agent.secret}", "Content-Type": "application/json"}
    other_auth = {**json_auth, "Authorization": f"Bearer {other.secret}"}
    bodies = [
        (b'{"bundle": "refunds"}', json_auth),
        (b'{"bundle": "refunds", "ttl_seconds": 120}', other_auth),
        (b'{"bundle": "refunds", "label": "canary", "routing_key": "user-1"}', json_auth),
        (b'{"bundle": "refunds", "label": "canary", "routing_key": "user-2"}', other_auth),
        (b'{"bundle": "refunds", "label": "nope"}', json_auth),
        (b'{"bundle": "refunds", "external_id": "conversation-9"}', json_auth),
        (b'{"bundle": "refunds", "variables": {}}', json_auth),
        (b'{"bundle": "refunds"', json_auth),
    ]

    async def one(body: bytes, headers: dict[str, str]):
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await fastlane.application(asgi_scope("POST", "/api/v1/sessions/", headers), receive, send)
        return sent[0]["status"], {k: v for k, v in sent[0]["headers"] if k not in IGNORED}, sent[1]["body"]

    async def main():
        return await asyncio.gather(*(one(body, headers) for body, headers in bodies))

    fast = asyncio.run(main())
    assert batches == [len(bodies)], batches
    global _django
    _django = _django or django_app()
    for (body, headers), answer in zip(bodies, fast, strict=True):
        if b"conversation-9" in body:  # Django answers the session the fast lane started: 200
            assert answer[0] == 201
            continue
        slow = _run(_django, "POST", "/api/v1/sessions/", headers, body)
        _same(answer, slow, volatile=SESSION_TIMES if answer[0] == 201 else ())
    assert [a[0] for a in fast] == [201, 201, 201, 201, 404, 201, 201, 400]
    started = [json.loads(a[2]) for a in fast[:4]]
    assert [s["version"] for s in started[:2]] == [1, 1]
    stored = {str(s.pk): s for s in Session.objects.filter(pk__in=[s["id"] for s in started])}
    assert stored[started[1]["id"]].ttl_seconds == 120 and stored[started[1]["id"]].api_key_id == other.actor.api_key_id
    for answer in started[2:]:  # the same routing key pins the same version one by one
        again = session_start(
            bundle=bundle, actor=agent.actor, label="canary", routing_key=stored[answer["id"]].routing_key
        )
        assert again[0].version_id == stored[answer["id"]].version_id


def test_hostile_session_requests_get_no_5xx_from_the_fast_lane(bundle, production, v1, agent):
    """The chaos suite's hostile corpus (lone surrogates, NUL, huge keys, broken JSON) on the
    session paths, batched and one by one, plus plain starts naming unstorable bundles (these
    reach the batched read): never a 5xx, never an exception."""
    from chaos.hostile import corpus

    _used(agent)
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    extra = [
        ("POST", "/api/v1/sessions/", json.dumps({"bundle": name}).encode(), {})
        for name in ["\ud800", "a\x00b", "\udc80tail", "x" * 20_000]
    ]
    bad = []
    for method, path, body, headers in [*corpus(str(session.pk)), *extra]:
        if not path.startswith("/api/v1/sessions/") or "?" in path:
            continue
        body = (body or b"").replace(b'"load"', b'"refunds"')
        sent = {"Authorization": f"Bearer {agent.secret}", "Content-Type": "application/json", **headers}
        try:
            status, _, out = _run(fastlane.application, method, path, sent, body)
        except Decline:
            continue  # Django's to answer (the chaos suite checks those through the server)
        if status >= 500:
            bad.append((path, body[:80], status, out[:200]))
    assert not bad, bad


def test_it_answers_renders_as_django_does(ops, agent):
    """POST .../render/ one by one in the fast lane: the same answers as SessionRenderApi for
    no body, turn variables, invalid variables, an unknown field, malformed JSON, another
    key's session and an ended session (the tail's clock line aside)."""
    from tests.registry.test_variables import templated

    other = make_api("agent", name="someone-else")
    bundle = bundle_create(name="tmpl", actor=ops.actor)
    version = version_publish(bundle=bundle, content=templated(), message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="r")
    session, _ = session_start(bundle=bundle, actor=agent.actor, variables={"customer": "Ada"})
    path = f"/api/v1/sessions/{session.pk}/render/"
    json_type = {"Content-Type": "application/json"}
    for body in [b"", b"{}", b'{"variables": {"ticket": 4711}}', b'{"variables": {"ticket": "x"}}']:
        fast, slow = both("POST", path, agent.secret, body, **json_type)
        _same(fast, slow, volatile=("tail",) if fast[0] == 200 else ())
    assert fast[0] == 400 and json.loads(fast[2])["error"]["code"] == "validation_error"
    for body in [b'{"variable": {}}', b'{"variables": {"ticket": 1}']:
        fast, slow = both("POST", path, agent.secret, body, **json_type)
        _same(fast, slow)
        assert fast[0] == 400
    good = both("POST", path, agent.secret, b'{"variables": {"ticket": 4711}}', **json_type)[0]
    assert good[0] == 200 and "- ticket: 4711" in json.loads(good[2])["tail"]
    _same(*both("POST", path, other.secret, b"", **json_type))  # another key's: 404
    session_end(session=session, actor=agent.actor)
    fast, slow = both("POST", path, agent.secret, b"", **json_type)
    _same(fast, slow)
    assert fast[0] == 410


def test_a_batched_fetch_reads_its_bytes_once(bundle, production, v1, agent, batches):
    """One fetch, one lookup of its bytes (the cache's counter moves by one per 200, none for a
    304), and one fetch counted for the version's usage."""
    from prometheus_client import REGISTRY

    from metrics import usage

    def lookups() -> float:
        return sum(
            REGISTRY.get_sample_value("registry_bundle_cache_total", {"result": result}) or 0.0
            for result in ("local", "redis", "database")
        )

    _used(agent)
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    auth = {"Authorization": f"Bearer {agent.secret}"}
    path = f"/api/v1/sessions/{session.pk}/bundle/"
    usage.flush()
    before = lookups()
    answers = _gather([("GET", path, auth), ("GET", path, {**auth, "If-None-Match": f'"{v1.content_hash}"'})])
    assert [a[0] for a in answers] == [200, 304] and sum(batches) == 2
    assert lookups() - before == 1
    assert usage.pending(v1.pk, "fetches") == 2
