"""/mcp follows the REST rules (issue 18): the same per-key budgets per kind of operation (a
protocol fetch or an end is a write, as POST /sessions/ and POST .../end/ are), the same 2 MiB
body cap and body deadline (413 / 408 in the contract's shape), and the same HTTPS redirect.
Called in process through the ASGI app, as the server calls it."""

import asyncio
import json
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from core.limits import REQUEST_BODY_MAX_BYTES
from core.redis_client import redis_client
from mcp_server.asgi import McpApp
from registry.services import bundle_create, label_move, version_publish
from tests.conftest import content, make_api

pytestmark = pytest.mark.django_db(transaction=True)
ACCEPT = "application/json, text/event-stream"


def _scope(headers: dict[str, str], *, scheme: str = "http", path: str = "/mcp") -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }


async def _send_to(app: McpApp, scope: dict[str, Any], chunks: list[bytes], *, hang: bool = False):
    """(status, headers, body) of one request whose body arrives as `chunks`; with `hang` the
    client never sends the last chunk."""
    queue = list(chunks)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if queue:
            chunk = queue.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(queue) or hang}
        await asyncio.sleep(3600)  # a client that stops sending (or, after the body, waits for the answer)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    headers = dict(sent[0]["headers"])
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def _rpc(tool: str, n: int = 1, **arguments: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    ).encode()


def _run(scenario):
    """Run `scenario(app)` on a fresh MCP app in its own event loop, stopping the app after."""

    async def main():
        app = McpApp()
        try:
            return await asyncio.wait_for(scenario(app), 30)
        finally:
            await app.stop()

    return asyncio.run(main())


@pytest.fixture
def faq(db):
    ops = make_api(Role.OPS, name="limits-ops")
    bundle = bundle_create(name="faq", actor=ops.actor)
    version = version_publish(bundle=bundle, content=content("Answer from the FAQ."), message="v1", actor=ops.actor)
    label_move(bundle=bundle, name="production", version=version.version, actor=ops.actor, reason="r")
    return bundle


def _secret(name: str) -> str:
    key, secret = api_key_create(name=name, role=Role.AGENT, actor=SYSTEM)
    # Key ids restart with each test database, the Redis counters do not: start this key at 0.
    redis = redis_client(settings.REDIS_URL)
    for name_ in redis.scan_iter(match=f"registry:rl:api-*:{key.pk}:*"):
        redis.delete(name_)
    return secret


@override_settings(API_THROTTLE_RATES={"read": "1000/h", "write": "2/h"})
def test_protocols_and_ends_count_against_the_write_budget(faq):
    secret = _secret("limits-writer")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}

    async def scenario(app):
        answers = []
        for n in range(3):
            answers.append(await _send_to(app, _scope(headers), [_rpc("get_capability_protocol", n, capability="faq")]))
        listed = await _send_to(app, _scope(headers), [_rpc("list_capabilities", 9)])
        ended = await _send_to(app, _scope(headers), [_rpc("end_session", 10, session_id=str(faq.pk))])
        return answers, listed, ended

    answers, listed, ended = _run(scenario)
    assert [a[0] for a in answers] == [200, 200, 429], answers
    # A JSON-RPC request is refused in JSON-RPC's shape (an MCP client reads no other), the
    # contract's code first in its message and the contract's error object as its data.
    error = json.loads(answers[2][2])["error"]
    assert error["message"].startswith("throttled: ") and error["data"]["code"] == "throttled"
    assert int(answers[2][1][b"retry-after"]) > 0
    assert listed[0] == 200  # a read: its own budget
    assert ended[0] == 429  # an end is a write, as POST .../end/ is


@override_settings(API_THROTTLE_RATES={"read": "2/h", "write": "1000/h"})
def test_the_catalog_and_protocol_chatter_count_as_reads(faq):
    secret = _secret("limits-reader")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}
    tools_list = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()

    async def scenario(app):
        first = await _send_to(app, _scope(headers), [_rpc("list_capabilities")])
        second = await _send_to(app, _scope(headers), [tools_list])
        third = await _send_to(app, _scope(headers), [_rpc("list_capabilities")])
        protocol = await _send_to(app, _scope(headers), [_rpc("get_capability_protocol", capability="faq")])
        return first, second, third, protocol

    first, second, third, protocol = _run(scenario)
    assert (first[0], second[0], third[0]) == (200, 200, 429)
    assert protocol[0] == 200 and "Answer from the FAQ." in protocol[2].decode()


def test_a_body_over_2_mib_is_413_in_the_contracts_shape(faq):
    secret = _secret("limits-big")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}
    half = b" " * (REQUEST_BODY_MAX_BYTES // 2)

    async def scenario(app):
        big = await _send_to(app, _scope(headers), [half, half, b"{}"])
        anonymous = await _send_to(app, _scope({"Content-Type": "application/json"}), [half, half, b"{}"])
        fits = await _send_to(app, _scope(headers), [_rpc("list_capabilities") + b" " * (REQUEST_BODY_MAX_BYTES - 200)])
        return big, anonymous, fits

    big, anonymous, fits = _run(scenario)
    for status, headers_out, body in (big, anonymous):
        assert status == 413
        assert headers_out[b"content-type"] == b"application/json"
        assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert fits[0] == 200


@override_settings(WEB_BODY_TIMEOUT=1)
def test_a_body_that_does_not_arrive_in_time_is_408(faq):
    secret = _secret("limits-slow")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}

    async def scenario(app):
        loop = asyncio.get_running_loop()
        began = loop.time()
        answer = await _send_to(app, _scope(headers), [b'{"jsonrpc": "2.0", '], hang=True)
        return answer, loop.time() - began

    (status, _, body), took = _run(scenario)
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    assert took < 5


@override_settings(SECURE_SSL_REDIRECT=True)
def test_plain_http_is_redirected_to_https_as_the_rest_of_the_app(faq, client):
    secret = _secret("limits-tls")
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": ACCEPT}

    async def scenario(app):
        plain = await _send_to(app, _scope(headers), [_rpc("list_capabilities")])
        secure = await _send_to(app, _scope(headers, scheme="https"), [_rpc("list_capabilities")])
        with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
            proxied = await _send_to(
                app, _scope({**headers, "X-Forwarded-Proto": "https"}), [_rpc("list_capabilities")]
            )
            forged = await _send_to(app, _scope(headers, scheme="https"), [_rpc("list_capabilities")])
        return plain, secure, proxied, forged

    plain, secure, proxied, forged = _run(scenario)
    assert plain[0] == 301 and plain[1][b"location"] == b"https://127.0.0.1/mcp"
    # Django's own answer for a REST path, for comparison: the same status and target.
    django = client.get("/api/v1/catalog/", HTTP_HOST="127.0.0.1")
    assert django.status_code == plain[0] and django["Location"] == "https://127.0.0.1/api/v1/catalog/"
    assert secure[0] == 200 and proxied[0] == 200
    # Behind a proxy with its header absent, the connection's own scheme counts, as Django's
    # HttpRequest.scheme does (edge.http follows it; tests/edge/test_edge_http.py compares the two).
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        django_secure = client.get("/api/v1/catalog/", HTTP_HOST="127.0.0.1", secure=True)
    assert forged[0] != 301 and django_secure.status_code != 301
