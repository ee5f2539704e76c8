"""Hostile input on every write endpoint: lone surrogates, NUL and huge keys, as keys and as
values. Whatever a client sends, the answer is the contract's error shape (or success), never
a 500, and an error message that repeats the input can always be encoded."""

import json
from typing import Any

import pytest

from tests.conftest import content

LONE = "\ud800"
HUGE_KEY = "k" * 100_000
HOSTILE_KEYS = [LONE, "\udfff", "\x00", "a\x00b", HUGE_KEY, "\ud83d\ude00\ud800"]
HOSTILE_VALUES = [LONE, "a\x00b", "x" * 20_000, "\udc80tail"]


def _encode(body: Any) -> bytes:
    # json.dumps writes lone surrogates as \udXXX escapes, exactly as a hostile client would.
    return json.dumps(body).encode("ascii")


def _write_endpoints(session_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, a valid body) for every write endpoint."""
    return [
        ("post", "/api/v1/bundles/", {"name": "other", "description": "d", "when_to_use": "w"}),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": content("hostile"), "message": "m"}),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "r"}),
        ("post", "/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 1, "reason": "r"}),
        ("post", "/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "r"}),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "label": "production", "external_id": "e"}),
        ("post", f"/api/v1/sessions/{session_id}/heartbeat/", {}),
        ("post", f"/api/v1/sessions/{session_id}/end/", {}),
    ]


def _bodies(valid: dict[str, Any]) -> list[dict[str, Any]]:
    bodies = [{**valid, key: 1} for key in HOSTILE_KEYS]
    for field, value in valid.items():
        if isinstance(value, str):
            bodies += [{**valid, field: hostile} for hostile in HOSTILE_VALUES]
    if "content" in valid:  # inside the content document: its keys, the prompt and a tool name
        doc = valid["content"]
        bodies += [{**valid, "content": {**doc, key: 1}} for key in HOSTILE_KEYS]
        bodies += [{**valid, "content": {**doc, "system_prompt": v}} for v in HOSTILE_VALUES]
        tool = doc["tools"][0]
        bodies += [{**valid, "content": {**doc, "tools": [{**tool, "name": v}]}} for v in HOSTILE_VALUES]
        bodies += [{**valid, "content": {**doc, "tools": [{**tool, k: 1}]}} for k in HOSTILE_KEYS]
    return bodies


def _assert_answered(response, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.content[:300]!r}"
    body = json.loads(response.content)  # valid UTF-8 JSON, whatever came in
    if response.status_code >= 400:
        assert set(body["error"]) == {"code", "message", "details"}, what


@pytest.fixture
def setting(ops, bundle, v1, v2, production):
    from access.actors import SYSTEM
    from sessions_app.services import session_start

    return session_start(bundle=bundle, actor=SYSTEM)[0]


def test_it_never_answers_500_to_hostile_keys_or_values_on_any_write_endpoint(ops, setting):
    checked = 0
    for method, path, valid in _write_endpoints(str(setting.id)):
        for body in _bodies(valid):
            response = getattr(ops.client, method)(path, data=_encode(body), content_type="application/json")
            _assert_answered(response, f"{method.upper()} {path} {str(body)[:120]}")
            checked += 1
    assert checked > 100


def test_it_names_a_lone_surrogate_key_in_the_error_without_crashing(ops, setting):
    body = _encode({"version": 1, "reason": "r", LONE: 1})
    response = ops.client.put("/api/v1/bundles/refunds/labels/staging/", data=body, content_type="application/json")
    assert response.status_code == 400
    error = json.loads(response.content)["error"]
    assert error["code"] == "validation_error"
    # The key is shown as its escape, so the client can still tell which one was refused.
    assert list(error["details"]) == ["\\ud800"]


def test_it_shortens_a_huge_key_in_the_error(ops, setting):
    body = _encode({"version": 1, "reason": "r", HUGE_KEY: 1})
    response = ops.client.put("/api/v1/bundles/refunds/labels/staging/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert len(response.content) < 5000


@pytest.mark.parametrize("name", ["lookup\n", "lookup\r\n", "\nlookup", "look\nup"])
def test_it_refuses_a_tool_name_with_a_newline(ops, bundle, name):
    doc = content("newline")
    doc["tools"] = [{**doc["tools"][0], "name": name}]
    response = ops.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "m"})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"


def test_it_refuses_a_key_scope_with_a_trailing_newline(db):
    from access.actors import SYSTEM
    from access.services import api_key_create
    from core.errors import DomainError

    with pytest.raises(DomainError):
        api_key_create(name="scoped", role="agent", scopes=["refunds\n"], actor=SYSTEM)


def test_it_replaces_a_request_id_with_a_trailing_newline(agent, bundle):
    response = agent.get("/api/v1/bundles/", HTTP_X_REQUEST_ID="abc\n")
    assert response.status_code == 200
    assert response["X-Request-ID"] != "abc\n"


@pytest.mark.parametrize("accept", ["text/html", "text/html,application/xhtml+xml;q=0.9", "image/png", "*/*", ""])
def test_it_answers_json_whatever_accept_says(agent, bundle, accept):
    response = agent.get("/api/v1/bundles/", HTTP_ACCEPT=accept)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["results"][0]["name"] == "refunds"


def test_it_answers_errors_in_json_whatever_accept_says(agent):
    response = agent.get("/api/v1/bundles/nope/", HTTP_ACCEPT="text/html")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
