"""The Python client (client/promptreg) against the real running service: a separate web
server process on the test database, no mocks. A recording transport only watches what
went over the wire (statuses and request counts)."""

import asyncio
import json
import threading
import time
import warnings
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from promptreg import (
    AsyncRegistry,
    Bundle,
    IntegrityError,
    NotAuthenticated,
    NotFound,
    OfflineWarning,
    PermissionDenied,
    Registry,
    Retry,
    SessionEnded,
    Throttled,
    Unavailable,
    VersionRevoked,
)

from core.redis_client import redis_client
from registry.services import bundle_create, label_move, version_publish, version_revoke
from tests.conftest import content, pinned_body
from tests.live import WebServer, registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder(httpx.HTTPTransport):
    """The real transport, remembering (method, path, status) of each exchange."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.seen.append((request.method, request.url.path, response.status_code))
        return response


def _in_thread(function, **kwargs):
    """Run a service from a worker thread, closing that thread's database connection after."""
    try:
        return function(**kwargs)
    finally:
        connection.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def client(registry_server, agent, recorder) -> Registry:  # noqa: F811
    with Registry(registry_server.url, agent.secret, transport=recorder) as registry:
        yield registry


def test_it_starts_a_pinned_session_and_keeps_its_bundle(client, production, v1, recorder):
    with client.start_session("refunds") as session:
        assert (session.bundle_name, session.version, session.label) == ("refunds", 1, "production")
        assert session.bundle.raw == pinned_body(v1)  # the exact bytes the registry serves
        assert session.bundle.content_hash == v1.content_hash
        assert session.bundle.tools[0]["name"] == "process_refund"
        assert session.bundle is session.bundle  # fetched once, kept for the session's life
    fetches = [s for m, p, s in recorder.seen if p.endswith("/bundle/")]
    assert fetches == [200]
    assert recorder.seen[-1][1].endswith("/end/") and session.ended


def test_a_second_session_on_the_same_version_revalidates_with_a_304(client, production, v1, recorder):
    first = client.start_session("refunds")
    second = client.start_session("refunds")
    assert second.bundle is first.bundle  # the same immutable object, by content hash
    assert first.refresh() is first.bundle  # and a refresh costs no body either
    fetches = [s for m, p, s in recorder.seen if p.endswith("/bundle/")]
    assert fetches == [200, 304, 304]
    first.end()
    second.end()


def test_it_stays_on_its_version_when_the_label_moves(client, bundle, production, v1, v2, ops):
    with client.start_session("refunds") as session:
        label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
        assert session.refresh().version == 1
        with client.start_session("refunds") as newer:
            assert newer.version == 2 and newer.bundle.system_prompt == "Version two."


def test_a_revoked_version_raises_version_revoked_with_the_current_labels(client, bundle, production, v1, v2, ops):
    session = client.start_session("refunds", version=2)
    version_revoke(version=v2, actor=ops.actor, reason="leaks data")
    with pytest.raises(VersionRevoked) as caught:
        session.refresh()
    assert caught.value.labels == {"production": 1}
    assert caught.value.status == 410 and caught.value.code == "version_revoked"
    with pytest.raises(VersionRevoked):
        session.heartbeat()


def test_the_context_manager_ends_the_session_on_an_exception(client, production, recorder):
    with pytest.raises(ZeroDivisionError), client.start_session("refunds") as session:
        raise ZeroDivisionError
    assert session.ended
    with pytest.raises(SessionEnded):
        session.refresh()
    with pytest.raises(SessionEnded):
        session.heartbeat()
    session.end()  # idempotent


def test_typed_errors_and_no_retry_on_other_4xx(registry_server, client, production, recorder):  # noqa: F811
    with pytest.raises(NotFound):
        client.start_session("no-such-bundle")
    assert len(recorder.seen) == 1  # a 404 is never retried
    with pytest.raises(PermissionDenied) as denied:
        client.publish("refunds", {"system_prompt": "x"})
    assert denied.value.status == 403
    with Registry(registry_server.url, "pr_" + "x" * 43) as wrong, pytest.raises(NotAuthenticated):
        wrong.catalog()
    assert [s for _, _, s in recorder.seen] == [404, 403]


def test_a_retried_start_returns_the_same_session(client, production):
    # Every start carries an external_id (generated when not given), so a retry after a lost
    # answer cannot pin a second session.
    first = client.start_session("refunds", external_id="conversation-42")
    again = client.start_session("refunds", external_id="conversation-42")
    assert again.id == first.id
    first.end()


@pytest.fixture(scope="module")
def restartable(django_db_setup, django_db_blocker):
    """A server of its own, for the tests that stop it; with a tiny read budget per key, so
    that throttling can be seen (each test has its own key)."""
    server = WebServer(env={"API_THROTTLE_READ": "3/d"})  # a day: no window boundary mid-test
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fresh_budget(agent):
    """Key ids repeat across test databases: forget any count a former key with this id left."""
    store = redis_client(settings.REDIS_URL)
    for name in store.scan_iter(f"registry:rl:*:{agent.actor.api_key_id}:*"):
        store.delete(name)


def test_it_retries_across_a_server_restart(restartable, agent, fresh_budget, production, v1):
    with Registry(restartable.url, agent.secret, retry=Retry(deadline=60, maximum=0.5)) as registry:
        session = registry.start_session("refunds")
        restartable.stop()
        restarter = threading.Thread(target=lambda: (time.sleep(1.0), restartable.start()))
        restarter.start()
        began = time.monotonic()
        session.heartbeat()  # connection refused until the server is back, then it works
        assert time.monotonic() - began >= 1.0
        restarter.join()
        assert session.refresh() is session.bundle  # a 304: the bytes are still those pinned
        session.end()


def test_it_gives_up_at_the_deadline_with_unavailable(agent):
    class Counting(httpx.HTTPTransport):
        attempts = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            Counting.attempts += 1
            return super().handle_request(request)

    closed = WebServer()  # a port nothing listens on
    began = time.monotonic()
    retry = Retry(deadline=1.0)
    with Registry(closed.url, agent.secret, retry=retry, transport=Counting()) as registry, pytest.raises(Unavailable):
        registry.catalog()
    # Retried (the first wait is at most 0.2 s), and never waited past the deadline: it gives up
    # as soon as the next wait would end after it, which may be well before it. (The slack is
    # for a loaded CI machine; a client that ignored the deadline would retry for much longer.)
    assert Counting.attempts >= 2
    assert time.monotonic() - began < retry.deadline + 2.0


def test_throttled_carries_retry_after_and_is_not_waited_past_the_deadline(restartable, agent, fresh_budget):
    recorder = Recorder()
    with Registry(restartable.url, agent.secret, retry=Retry(deadline=2.0), transport=recorder) as registry:
        for _ in range(3):
            registry.catalog()
        with pytest.raises(Throttled) as caught:
            registry.catalog()  # Retry-After is longer than the deadline: no point waiting
    assert caught.value.retry_after and caught.value.retry_after > 2
    assert [s for _, _, s in recorder.seen] == [200, 200, 200, 429]


def test_keep_alive_holds_the_lease_and_stops_at_the_end(client, production):
    kept = client.start_session("refunds", ttl_seconds=3, keep_alive=True)
    lapsed = client.start_session("refunds", ttl_seconds=3)
    time.sleep(4.5)  # a heartbeat every second; 3 s without one would lapse it
    assert client.json("GET", f"/api/v1/sessions/{kept.id}/")["status"] == "active"
    assert client.json("GET", f"/api/v1/sessions/{lapsed.id}/")["status"] == "expired"
    assert kept.keep_alive_error is None
    kept.end()
    assert not kept._keeper.is_alive()


def test_offline_snapshot_is_used_only_when_unreachable_and_never_silently(
    registry_server,  # noqa: F811
    agent,
    production,
    v1,
    tmp_path,
):
    with Registry(registry_server.url, agent.secret, snapshot_dir=str(tmp_path)) as registry:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # online: no warning at all
            registry.start_session("refunds").end()
    assert (tmp_path / "refunds@production.json").read_bytes() == pinned_body(v1)

    unreachable = WebServer().url  # a port nothing listens on
    with Registry(unreachable, agent.secret, snapshot_dir=str(tmp_path), retry=Retry(deadline=0.5)) as registry:
        with pytest.warns(OfflineWarning, match="OFFLINE"):
            session = registry.start_session("refunds")
        assert session.offline and session.version == 1 and session.bundle.raw == pinned_body(v1)
        session.end()  # nothing to end on the server
        with pytest.raises(Unavailable):
            session.route([{"role": "user", "content": "hi"}])
        with pytest.raises(Unavailable):  # no snapshot for this label: no guess
            registry.start_session("refunds", label="staging")
    with Registry(unreachable, agent.secret, retry=Retry(deadline=0.5)) as registry, pytest.raises(Unavailable):
        registry.start_session("refunds")  # without snapshot_dir there is no fallback


def test_the_async_twin_behaves_the_same(registry_server, agent, bundle, production, v1, v2, ops, tmp_path):  # noqa: F811
    async def scenario() -> None:
        async with AsyncRegistry(registry_server.url, agent.secret, snapshot_dir=str(tmp_path)) as registry:
            async with await registry.start_session("refunds") as session:
                assert session.bundle.raw == pinned_body(v1)
                other = await registry.start_session("refunds", version=2)
                await asyncio.to_thread(_in_thread, version_revoke, version=v2, actor=ops.actor, reason="bad")
                with pytest.raises(VersionRevoked) as caught:
                    await other.refresh()
                assert caught.value.labels == {"production": 1}
                assert (await session.refresh()) is session.bundle
                await session.heartbeat()
            assert session.ended
            with pytest.raises(SessionEnded):
                await session.refresh()
            with pytest.raises(NotFound):
                await registry.start_session("nope")
            kept = await registry.start_session("refunds", ttl_seconds=3, keep_alive=True)
            await asyncio.sleep(4.5)
            assert (await registry.json("GET", f"/api/v1/sessions/{kept.id}/"))["status"] == "active"
            await kept.end()
        async with AsyncRegistry(
            WebServer().url, agent.secret, snapshot_dir=str(tmp_path), retry=Retry(deadline=0.5)
        ) as offline_registry:
            with pytest.warns(OfflineWarning):
                offline = await offline_registry.start_session("refunds")
            assert offline.offline and offline.bundle.raw == pinned_body(v1)

    asyncio.run(scenario())


def test_a_body_that_does_not_match_its_hash_is_refused(client, production, v1):
    with client.start_session("refunds") as session:
        raw = session.bundle.raw
    assert Bundle.from_body(raw).content_hash == v1.content_hash
    with pytest.raises(IntegrityError):
        Bundle.from_body(raw.replace(b"refund agent", b"refund agenT"))


VECTORS = json.loads((Path(__file__).parent.parent / "fixtures" / "compaction_vectors.json").read_text())["vectors"]


def test_compaction_in_the_client_equals_the_endpoint_on_every_vector(client, ops):
    """The same vectors as tests/turns/test_compaction.py: the registry's endpoint and the client's
    in-process function (promptreg.compaction, a byte-identical copy of core/compaction.py:
    tests/turns/test_compaction.py) give the expected answer."""
    bundle = bundle_create(name="compacting", description="d", actor=ops.actor)
    for number, vector in enumerate(VECTORS, start=1):
        doc = content(f"Compaction vector {number}.")
        if vector["policy"] is not None:
            doc["compaction"] = vector["policy"]
        version = version_publish(bundle=bundle, content=doc, message=vector["name"], actor=ops.actor).version
        with client.start_session("compacting", version=version.number) as session:
            remote = session.compact(vector["messages"])
            local = session.compact(vector["messages"], local=True)
        assert remote == vector["expected"], vector["name"]
        assert local == vector["expected"], vector["name"]


def test_the_per_turn_wrappers_render_route_and_report(client, ops):
    """session.render(), route(), report_turn() and compact() against their endpoints."""
    cards = [
        {
            "name": name,
            "summary": summary,
            "description": f"{summary}. Inputs and outputs of {name}; not for anything else.",
            "keywords": keywords,
            "category": category,
            "examples": examples,
            "level": "L2",
        }
        for name, summary, category, keywords, examples in [
            ("refund_order", "Use when the customer wants money back", "billing",
             ["refund", "money back", "return"], ["I want a refund", "give me my money back"]),
            ("track_parcel", "Use when the customer asks where a parcel is", "shipping",
             ["track", "parcel", "delivery"], ["where is my parcel", "track my delivery"]),
        ]
    ]  # fmt: skip
    doc = content("Help customers, politely.")
    doc["variables"] = {"today_note": {"type": "string", "scope": "turn", "required": False, "default": "-"}}
    doc["skills"] = cards
    bundle = bundle_create(name="turns", description="d", actor=ops.actor)
    version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor)
    with client.start_session("turns", version=1) as session:
        turn = session.render(variables={"today_note": "sunny"})
        assert turn["prefix"]["system"].startswith("Help customers, politely.") and "sunny" in turn["tail"]
        assert turn["version"] == 1 and len(turn["prefix_sha256"]) == 64
        routed = session.route([{"role": "user", "content": "I want my money back for order 7"}], k=1)
        assert [r["name"] for r in routed["routed"]] == ["refund_order"]
        reported = session.report_turn(routed["turn"], invoked=["refund_order"], expected=["refund_order"])
        assert (reported["turn"], reported["invoked"]) == (routed["turn"], ["refund_order"])
        assert reported["expected"] == ["refund_order"]
        assert "refund_order" in reported["loaded"]
        messages = [{"role": "tool", "tool_call_id": "c1", "content": "x" * 30}] * 7
        assert session.compact(messages) == session.compact(messages, local=True)
        assert session.compact(messages)["elided"] == 2


def _turn_endpoint_exists() -> bool:
    from django.urls import Resolver404, resolve

    try:
        resolve("/api/v1/sessions/00000000-0000-0000-0000-000000000000/turn/")
    except Resolver404:
        return False
    return True


class BodyRecorder(Recorder):
    """Also keeps each exchange's JSON request body and the size of its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[tuple[str, dict, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        sent = json.loads(request.content) if request.content else {}
        self.bodies.append((request.url.path, sent, len(response.content)))
        return response


def _turn_bundle(ops) -> None:
    doc = content("Help customers, politely. " + "Always check the order first. " * 40)
    doc["variables"] = {"note": {"type": "string", "scope": "turn", "required": False, "default": "-"}}
    doc["skills"] = [
        {
            "name": "refund_order",
            "summary": "Use when the customer wants money back",
            "description": "Refunds an order. Inputs: order id; not for exchanges.",
            "keywords": ["refund", "money back", "reimburse"],
            "category": "billing",
            "examples": ["I want a refund", "give me my money back"],
            "level": "L2",
        }
    ]
    bundle = bundle_create(name="one-call", description="d", actor=ops.actor)
    version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor)


@pytest.mark.skipif(not _turn_endpoint_exists(), reason="the turn endpoint is not in this build")
def test_turn_sends_the_prefix_once_per_session_and_keeps_it_by_hash(registry_server, agent, ops):  # noqa: F811
    _turn_bundle(ops)
    wire = BodyRecorder()
    messages = [{"role": "user", "content": "I want my money back for order 7"}]
    with Registry(registry_server.url, agent.secret, transport=wire) as registry:
        with registry.start_session("one-call", version=1) as session:
            first = session.turn(messages, variables={"note": "sunny"}, k=1, format="anthropic")
            second = session.turn(messages, invoked=["refund_order"], format="anthropic")
            neutral = session.turn(messages)  # no format: the hash alone is enough
            chat = session.turn(messages, format="openai-chat")  # first time: sent whole
            chat_again = session.turn(messages, format="openai-chat")
            # Another process holding the same session starts without a prefix: it gets one.
            other = registry.session(session.id)
            fresh = other.turn(messages, format="anthropic")
    turns = [(sent, size) for path, sent, size in wire.bodies if path.endswith("/turn/")]
    hashes = [sent.get("prefix_sha256") for sent, _ in turns]
    assert hashes == [None, first["prefix_sha256"], first["prefix_sha256"], None, first["prefix_sha256"], None]
    assert turns[1][0]["invoked"] == ["refund_order"] and turns[1][0]["format"] == "anthropic"
    assert not first.get("prefix_unchanged") and second["prefix_unchanged"] is True and neutral["prefix_unchanged"]
    # The held prefix and the request's stable part are put back: every answer is whole.
    assert second["prefix"] == first["prefix"] == neutral["prefix"] == fresh["prefix"]
    assert first["prefix"]["system"].startswith("Help customers, politely.") and "sunny" in first["tail"]
    assert (second["request"]["system"], second["request"]["tools"]) == (
        first["request"]["system"],
        first["request"]["tools"],
    )
    assert second["request"]["system"] == fresh["request"]["system"] and "request_reuse" not in second
    assert (
        chat_again["request"]["messages"][0]
        == chat["request"]["messages"][0]
        == {
            "role": "system",
            "content": first["prefix"]["system"],
        }
    )
    # Once per session and format: the anthropic turns, then openai-chat's first.
    assert (session.turn_prefix.received, other.turn_prefix.received) == (2, 1)
    # The prefix's bytes crossed once: the second answer is smaller by at least the prefix twice
    # over (the prefix itself and the request's copy of it).
    prefix_bytes = len(json.dumps(first["prefix"], ensure_ascii=False).encode())
    assert turns[1][1] < turns[0][1] - prefix_bytes
    assert [r["name"] for r in first["skills"]["routed"]] == ["refund_order"]
    assert second["turn"] == first["turn"] + 1


@pytest.mark.skipif(not _turn_endpoint_exists(), reason="the turn endpoint is not in this build")
def test_the_async_turn_keeps_the_prefix_the_same_way(registry_server, agent, ops):  # noqa: F811
    _turn_bundle(ops)
    messages = [{"role": "user", "content": "refund order 7"}]

    async def scenario():
        async with AsyncRegistry(registry_server.url, agent.secret) as registry:
            async with await registry.start_session("one-call", version=1) as session:
                first = await session.turn(messages)
                second = await session.turn(messages)
                return first, second, session.turn_prefix.received

    first, second, received = asyncio.run(scenario())
    assert second["prefix_unchanged"] is True and second["prefix"] == first["prefix"] and received == 1
    assert second["prefix_sha256"] == first["prefix_sha256"] and second["turn"] == first["turn"] + 1


def test_turn_refuses_an_unknown_format_before_sending(client, production):
    with client.start_session("refunds") as session:
        with pytest.raises(ValueError, match="format must be one of"):
            session.turn([{"role": "user", "content": "hi"}], format="claude")
