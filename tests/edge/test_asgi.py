"""The ASGI front (edge.dispatch, edge.django_lane, edge.serve): routing by prefix,
lifespan forwarded to sub-apps, bodies read on the event loop with a size cap and a deadline,
and a real server that keeps answering while slow clients hold connections."""

import asyncio
import json
import socket
import urllib.request
from typing import Any

import pytest
from django.test import override_settings

from edge.dispatch import Decline, Dispatcher, Route, replay
from edge.django_lane import django_app, shutdown_pool
from tests.live import web_server


@pytest.fixture(autouse=True)
def _close_pool_connections():
    yield
    shutdown_pool()


def _scope(path: str, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers or [(b"host", b"127.0.0.1")],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }


def _call(app, scope: dict[str, Any], messages: list[dict[str, Any]] | None = None, *, hang: bool = False):
    """Run one request through `app`; `messages` are what receive() yields, then it hangs
    (hang=True: a client that stopped sending) or reports a disconnect."""
    pending = list(messages or [{"type": "http.request", "body": b"", "more_body": False}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        if hang:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def _answer(text: bytes):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": text})

    return app


def test_it_sends_a_path_to_the_first_matching_route_and_everything_else_to_the_default():
    dispatcher = Dispatcher(
        routes=[Route("/mcp", _answer(b"mcp")), Route("/api/v1/sessions/", _answer(b"fast"))],
        default=_answer(b"django"),
    )
    assert _call(dispatcher, _scope("/mcp"))[2] == b"mcp"
    assert _call(dispatcher, _scope("/api/v1/sessions/x/bundle/"))[2] == b"fast"
    assert _call(dispatcher, _scope("/api/v1/bundles/"))[2] == b"django"


def test_it_passes_a_declined_request_on():
    async def declines(scope, receive, send):
        raise Decline

    dispatcher = Dispatcher(routes=[Route("/api/", declines)], default=_answer(b"django"))
    assert _call(dispatcher, _scope("/api/v1/bundles/"))[2] == b"django"


def test_it_forwards_lifespan_to_the_sub_apps_that_ask_and_reports_their_failure():
    events: list[str] = []

    def child(name: str, fail: bool = False):
        async def app(scope, receive, send):
            assert scope["type"] == "lifespan"
            await receive()
            if fail:
                await send({"type": "lifespan.startup.failed", "message": "no"})
                return
            events.append(f"{name} up")
            await send({"type": "lifespan.startup.complete"})
            await receive()
            events.append(f"{name} down")
            await send({"type": "lifespan.shutdown.complete"})

        return app

    def run(dispatcher: Dispatcher) -> list[str]:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        replies: list[str] = []

        async def receive():
            return inbox.pop(0)

        async def send(message):
            replies.append(message["type"])
            if message["type"] == "lifespan.startup.failed":
                inbox.clear()

        asyncio.run(dispatcher({"type": "lifespan"}, receive, send))
        return replies

    ok = Dispatcher(
        routes=[Route("/a", child("a"), lifespan=True), Route("/b", child("b"), lifespan=True)], default=_answer(b"")
    )
    assert run(ok) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert events == ["a up", "b up", "b down", "a down"]

    events.clear()
    failing = Dispatcher(
        routes=[Route("/a", child("a"), lifespan=True), Route("/b", child("b", fail=True), lifespan=True)],
        default=_answer(b""),
    )
    assert run(failing) == ["lifespan.startup.failed"]
    assert events == ["a up", "a down"], "what started is stopped again"


def test_django_behind_the_front_answers_as_django_does():
    status, headers, body = _call(django_app(), _scope("/healthz"))
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    assert b"x-request-id" in headers


@override_settings(WEB_BODY_TIMEOUT=1)
def test_a_body_that_does_not_arrive_in_time_is_a_408_without_reaching_django():
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"100")]
    status, response_headers, body = _call(
        django_app(),
        _scope("/api/v1/sessions/", "POST", headers),
        [{"type": "http.request", "body": b'{"bundle":', "more_body": True}],
        hang=True,
    )
    assert status == 408
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert response_headers[b"connection"] == b"close"


@override_settings(MAX_REQUEST_BODY_BYTES=10)
def test_a_body_over_the_limit_is_a_413_even_without_a_content_length():
    status, _, body = _call(
        django_app(),
        _scope("/api/v1/sessions/", "POST"),
        [{"type": "http.request", "body": b"x" * 8, "more_body": True}, {"type": "http.request", "body": b"x" * 8}],
    )
    assert status == 413
    assert json.loads(body)["error"]["code"] == "payload_too_large"


@pytest.mark.timeout(120)
def test_the_server_keeps_answering_while_slow_clients_hold_connections(transactional_db):
    """Five more slow-body clients than the server has threads: each announces 100 bytes and
    sends 10. They hold coroutines, not threads, so /healthz still answers."""
    with web_server(workers=1, env={"WEB_THREADS": "2"}) as base:
        port = int(base.rsplit(":", 1)[1])
        slow = []
        for _ in range(7):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                b"POST /api/v1/sessions/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"bundle":'
            )
            slow.append(s)
        try:
            for _ in range(5):
                with urllib.request.urlopen(base + "/healthz", timeout=5) as response:
                    assert response.status == 200
        finally:
            for s in slow:
                s.close()


def test_a_replayed_body_comes_once_then_the_clients_own_receive_or_a_disconnect():
    """The one replay of a body already read (the fast lane declining, /mcp after its checks):
    the next app reads the body, then the client's own receive when it is given."""

    async def client() -> dict[str, Any]:
        return {"type": "http.disconnect", "from": "client"}

    async def received() -> list[dict[str, Any]]:
        handed, alone = replay(b'{"a": 1}', client), replay(b"x")
        return [await handed(), await handed(), await alone(), await alone()]

    body, then, alone_body, alone_then = asyncio.run(received())
    assert body == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}
    assert alone_body == {"type": "http.request", "body": b"x", "more_body": False}
    assert then == {"type": "http.disconnect", "from": "client"}
    assert alone_then == {"type": "http.disconnect"}
