"""The REST layer's errors: every refusal has the contract's shape and status, and writes nothing.

Each test snapshots the tables an API call could touch (bundles, versions, labels, label
history, sessions: row counts and the mutable columns) and checks they are unchanged after
the refused request, so a handler that writes first and refuses afterwards is caught too."""

import json
import uuid
from base64 import b64encode
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.utils import timezone
from rest_framework.exceptions import APIException

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_revoke
from api.errors import exception_handler
from core import limits
from registry.models import Bundle, BundleVersion, Label
from registry.services import bundle_create, label_move, version_publish, version_revoke
from sessions_app.models import Session
from sessions_app.services import session_end, session_start
from tests.conftest import Api, content, make_api

HistoricalLabel = Label.history.model
TWO_MIB = 2 * 1024 * 1024

ERROR_KEYS = {"code", "message", "details"}


# --- helpers ------------------------------------------------------------------------------------


def row_counts() -> dict[str, int]:
    return {
        "bundles": Bundle.objects.count(),
        "versions": BundleVersion.objects.count(),
        "labels": Label.objects.count(),
        "label_history": HistoricalLabel.objects.count(),
        "sessions": Session.objects.count(),
    }


def db_state() -> dict[str, Any]:
    """Row counts plus every column a refused request might wrongly have written."""
    return {
        "counts": row_counts(),
        "bundles": list(Bundle.objects.order_by("pk").values_list("pk", "name", "description")),
        "versions": list(
            BundleVersion.objects.order_by("pk").values_list(
                "pk", "number", "content_hash", "message", "state", "drained_at", "revoked_at"
            )
        ),
        "labels": list(
            Label.objects.order_by("pk").values_list(
                "pk", "name", "version_id", "previous_version_id", "protected", "updated_at", "updated_by"
            )
        ),
        "sessions": list(
            Session.objects.order_by("pk").values_list("pk", "status", "last_seen_at", "expires_at", "ended_at")
        ),
    }


@contextmanager
def nothing_written() -> Iterator[None]:
    before = db_state()
    yield
    after = db_state()
    assert after["counts"] == before["counts"]
    assert after == before


def assert_error(response, status: int, code: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract's error shape, exactly; returns the inner error object."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert list(body) == ["error"]
    error = body["error"]
    assert set(error) == ERROR_KEYS
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"].strip() and error["message"].endswith("."), error["message"]
    assert isinstance(error["details"], dict)
    if details is not None:
        assert error["details"] == details
    return error


def assert_field_errors(error: dict[str, Any], *fields: str) -> None:
    """validation_error details: exactly these fields, each with a non-empty list of messages."""
    assert set(error["details"]) == set(fields), error["details"]
    for field in fields:
        messages = error["details"][field]
        assert isinstance(messages, list) and messages
        assert all(isinstance(m, str) and m for m in messages)


def send(api: Api, method: str, path: str, body: Any = None, **extra: Any):
    if method == "get":
        return api.get(path, **extra)
    if method in ("post", "put"):
        return getattr(api, method)(path, body, **extra)
    return getattr(api.client, method)(path, **extra)


@pytest.fixture
def session(agent, bundle, production):
    started, _ = session_start(bundle=bundle, actor=agent.actor)
    return started


# Every endpoint of the contract, with a body that would succeed for a key of enough role.
def all_endpoints(session_id: uuid.UUID) -> list[tuple[str, str, Any]]:
    return [
        ("get", "/api/v1/bundles/", None),
        ("post", "/api/v1/bundles/", {"name": "billing", "description": "x"}),
        ("get", "/api/v1/bundles/refunds/", None),
        ("get", "/api/v1/bundles/refunds/versions/", None),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": content("new"), "message": "m"}),
        ("get", "/api/v1/bundles/refunds/versions/1/", None),
        ("post", "/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "r"}),
        ("get", "/api/v1/bundles/refunds/labels/", None),
        ("get", "/api/v1/bundles/refunds/labels/production/", None),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "r"}),
        ("get", "/api/v1/bundles/refunds/labels/production/history/", None),
        ("post", "/api/v1/bundles/refunds/labels/production/rollback/", {"reason": "r"}),
        ("post", "/api/v1/sessions/", {"bundle": "refunds"}),
        ("get", f"/api/v1/sessions/{session_id}/", None),
        ("get", f"/api/v1/sessions/{session_id}/bundle/", None),
        ("post", f"/api/v1/sessions/{session_id}/heartbeat/", None),
        ("post", f"/api/v1/sessions/{session_id}/end/", None),
    ]


WRITE_ENDPOINTS = [
    ("post", "/api/v1/bundles/"),
    ("post", "/api/v1/bundles/refunds/versions/"),
    ("put", "/api/v1/bundles/refunds/labels/staging/"),
    ("post", "/api/v1/bundles/refunds/labels/production/rollback/"),
    ("post", "/api/v1/bundles/refunds/versions/1/revoke/"),
    ("post", "/api/v1/sessions/"),
]


# --- 400 malformed_json -------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), WRITE_ENDPOINTS)
@pytest.mark.parametrize(
    "raw",
    [
        b"{bad",
        b'{"name": "x",}',
        b'{"name": "x"} trailing',
        b'{"reason": NaN}',
        b'{"reason": "\xff\xfe"}',
        b"'single quotes'",
    ],
    ids=["unterminated", "trailing-comma", "trailing-garbage", "nan", "not-utf8", "single-quotes"],
)
def test_it_answers_malformed_json_with_400_on_every_write(ops, v2, production, method, path, raw):
    with nothing_written():
        response = send(ops, method, path, raw)
    error = assert_error(response, 400, "malformed_json")
    assert set(error["details"]) == {"body"}


# --- 400 validation_error -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "fields"),
    [
        # bundles
        ("post", "/api/v1/bundles/", {}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": 5}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": None}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": ["billing"]}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": "Billing Agent"}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": " billing"}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": "b" * 101}, ["name"]),
        ("post", "/api/v1/bundles/", {"name": "billing", "description": 5}, ["description"]),
        ("post", "/api/v1/bundles/", {"name": "billing", "descripton": "typo"}, ["descripton"]),
        # versions
        ("post", "/api/v1/bundles/refunds/versions/", {"message": "m"}, ["content"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": [content()], "message": "m"}, ["content"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": "You are...", "message": "m"}, ["content"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": None, "message": "m"}, ["content"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": {}, "message": "m"}, ["content.system_prompt"]),
        (
            "post",
            "/api/v1/bundles/refunds/versions/",
            {"content": content("x", temperature=0), "message": "m"},
            ["content.temperature"],
        ),
        (
            "post",
            "/api/v1/bundles/refunds/versions/",
            {"content": content("x", tools={}), "message": "m"},
            ["content.tools"],
        ),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": content("x")}, ["message"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": content("x"), "message": 5}, ["message"]),
        ("post", "/api/v1/bundles/refunds/versions/", {"content": content("x"), "message": ""}, ["message"]),
        (
            "post",
            "/api/v1/bundles/refunds/versions/",
            {"content": content("x"), "message": "m", "author": "me"},
            ["author"],
        ),
        # labels
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": "2", "reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 2.0, "reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": True, "reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": None, "reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 0, "reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"reason": "r"}, ["version"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 2}, ["reason"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": 5}, ["reason"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "   "}, ["reason"]),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "r", "force": True}, ["force"]),
        ("put", "/api/v1/bundles/refunds/labels/Staging/", {"version": 2, "reason": "r"}, ["label"]),
        # rollback
        ("post", "/api/v1/bundles/refunds/labels/production/rollback/", {}, ["reason"]),
        (
            "post",
            "/api/v1/bundles/refunds/labels/production/rollback/",
            {"to_version": "1", "reason": "r"},
            ["to_version"],
        ),
        (
            "post",
            "/api/v1/bundles/refunds/labels/production/rollback/",
            {"to_version": True, "reason": "r"},
            ["to_version"],
        ),
        (
            "post",
            "/api/v1/bundles/refunds/labels/production/rollback/",
            {"version": 1, "reason": "r"},
            ["version"],
        ),
        # revoke
        ("post", "/api/v1/bundles/refunds/versions/2/revoke/", {}, ["reason"]),
        ("post", "/api/v1/bundles/refunds/versions/2/revoke/", {"reason": 5}, ["reason"]),
        ("post", "/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "r", "why": "x"}, ["why"]),
        # sessions
        ("post", "/api/v1/sessions/", {}, ["bundle"]),
        ("post", "/api/v1/sessions/", {"bundle": 5}, ["bundle"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "label": 5}, ["label"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "label": ["production"]}, ["label"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "version": "2"}, ["version"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "version": 1.5}, ["version"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "version": 0}, ["version"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": True}, ["ttl_seconds"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": "60"}, ["ttl_seconds"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": 60.5}, ["ttl_seconds"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": 0}, ["ttl_seconds"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": 604801}, ["ttl_seconds"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "external_id": 5}, ["external_id"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "external_id": ""}, ["external_id"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "external_id": "x" * 201}, ["external_id"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "external_id": "a\u0000b"}, ["external_id"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "lable": "production"}, ["lable"]),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "label": "production", "version": 1}, ["label"]),
    ],
)
def test_it_answers_a_wrong_field_with_400_naming_the_field(ops, v2, production, method, path, body, fields):
    with nothing_written():
        response = send(ops, method, path, body)
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, *fields)


def test_it_names_unknown_fields_alongside_wrong_known_ones(agent, production):
    with nothing_written():
        response = agent.post("/api/v1/sessions/", {"bundle": 5, "lable": "production", "ttl": 60})
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, "bundle", "lable", "ttl")
    assert error["details"]["lable"] == ["Unknown field."]


@pytest.mark.parametrize("raw", [b"[]", b'"refunds"', b"5", b"null", b"true"])
def test_it_answers_a_body_that_is_not_an_object_with_400(agent, production, raw):
    with nothing_written():
        response = agent.post("/api/v1/sessions/", raw)
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, "non_field_errors")


def test_it_answers_an_empty_body_with_400_naming_the_required_fields(publisher, bundle):
    with nothing_written():
        response = publisher.client.post("/api/v1/bundles/refunds/versions/", content_type="application/json")
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, "content", "message")


def test_it_refuses_content_whose_canonical_form_is_over_1_mib_with_400(publisher, bundle):
    doc = content("big", metadata={"pad": "x" * (1024 * 1024)})
    with nothing_written():
        response = publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "big"})
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, "content")


def test_it_answers_a_content_length_that_is_not_a_number_with_400(publisher, bundle):
    with nothing_written():
        response = publisher.post("/api/v1/bundles/", {"name": "billing"}, CONTENT_LENGTH="ten")
    error = assert_error(response, 400, "validation_error")
    assert_field_errors(error, "Content-Length")


# --- 401 not_authenticated ----------------------------------------------------------------------


def test_it_answers_every_endpoint_without_a_key_with_401(anonymous, session, v2):
    for method, path, body in all_endpoints(session.pk):
        with nothing_written():
            response = send(anonymous, method, path, body)
        assert_error(response, 401, "not_authenticated", details={})
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize(
    "header",
    [
        "Bearer pr_not-a-real-key",
        "Bearer not-even-our-prefix",
        "Bearer",
        "Bearer two parts",
        "Token pr_whatever",
        "Basic dXNlcjpwYXNz",
    ],
)
def test_it_answers_a_missing_or_bad_key_with_401(db, production, header):
    client = Api(None, None)
    with nothing_written():
        get = client.get("/api/v1/bundles/", HTTP_AUTHORIZATION=header)
        post = client.post("/api/v1/sessions/", {"bundle": "refunds"}, HTTP_AUTHORIZATION=header)
    for response in (get, post):
        assert_error(response, 401, "not_authenticated", details={})
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_it_answers_a_revoked_key_with_401(db, production):
    from access.models import ApiKey

    api = make_api(Role.OPS, "leaked")
    api_key_revoke(key=ApiKey.objects.get(pk=api.actor.api_key_id), actor=SYSTEM)
    with nothing_written():
        response = api.post("/api/v1/sessions/", {"bundle": "refunds"})
    assert_error(response, 401, "not_authenticated", details={})


# --- 403 permission_denied ----------------------------------------------------------------------


def test_it_refuses_an_agent_creating_a_bundle(agent):
    with nothing_written():
        response = agent.post("/api/v1/bundles/", {"name": "billing", "description": ""})
    assert_error(response, 403, "permission_denied", details={})


def test_it_refuses_an_agent_publishing_a_version(agent, bundle):
    with nothing_written():
        response = agent.post("/api/v1/bundles/refunds/versions/", {"content": content(), "message": "v1"})
    assert_error(response, 403, "permission_denied", details={})


def test_it_refuses_an_agent_moving_a_label(agent, v1):
    with nothing_written():
        response = agent.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "try"})
    assert_error(response, 403, "permission_denied", details={})


def test_it_refuses_a_publisher_moving_production(publisher, v2, production):
    with nothing_written():
        response = publisher.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship"})
    assert_error(response, 403, "permission_denied", details={})
    assert Label.objects.get(name="production").version_id == production.version_id


def test_it_refuses_a_publisher_touching_production_even_without_moving_it(publisher, production):
    with nothing_written():
        response = publisher.put("/api/v1/bundles/refunds/labels/production/", {"version": 1, "reason": "same"})
    assert_error(response, 403, "permission_denied", details={})


def test_it_refuses_a_publisher_creating_production(publisher, v1):
    # Protected on creation, so creating it is already a move of a protected label.
    with nothing_written():
        response = publisher.put("/api/v1/bundles/refunds/labels/production/", {"version": 1, "reason": "first"})
    assert_error(response, 403, "permission_denied", details={})


@pytest.mark.parametrize("role", [Role.AGENT, Role.PUBLISHER])
def test_it_refuses_rolling_back_below_ops(db, ops, bundle, v1, v2, production, role):
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    api = make_api(role)
    with nothing_written():
        response = api.post("/api/v1/bundles/refunds/labels/production/rollback/", {"reason": "bad"})
    assert_error(response, 403, "permission_denied", details={})


@pytest.mark.parametrize("role", [Role.AGENT, Role.PUBLISHER])
def test_it_refuses_revoking_below_ops(db, v2, production, role):
    api = make_api(role)
    with nothing_written():
        response = api.post("/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "bad"})
    assert_error(response, 403, "permission_denied", details={})


# --- 404 not_found ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "/api/v1/bundles/nope/", None),
        ("get", "/api/v1/bundles/nope/versions/", None),
        ("post", "/api/v1/bundles/nope/versions/", {"content": content(), "message": "m"}),
        ("get", "/api/v1/bundles/nope/versions/1/", None),
        ("get", "/api/v1/bundles/refunds/versions/9/", None),
        ("get", "/api/v1/bundles/refunds/versions/0/", None),
        ("get", "/api/v1/bundles/refunds/versions/99999999999999999999/", None),
        ("post", "/api/v1/bundles/refunds/versions/9/revoke/", {"reason": "r"}),
        ("post", "/api/v1/bundles/nope/versions/1/revoke/", {"reason": "r"}),
        ("get", "/api/v1/bundles/nope/labels/", None),
        ("get", "/api/v1/bundles/refunds/labels/nope/", None),
        ("get", "/api/v1/bundles/refunds/labels/nope/history/", None),
        ("get", "/api/v1/bundles/nope/labels/production/history/", None),
        ("put", "/api/v1/bundles/nope/labels/staging/", {"version": 1, "reason": "r"}),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 9, "reason": "r"}),
        ("put", "/api/v1/bundles/refunds/labels/staging/", {"version": 10**30, "reason": "r"}),
        ("post", "/api/v1/bundles/refunds/labels/nope/rollback/", {"reason": "r"}),
        ("post", "/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 9, "reason": "r"}),
        ("post", "/api/v1/bundles/nope/labels/production/rollback/", {"reason": "r"}),
        ("post", "/api/v1/sessions/", {"bundle": "nope"}),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "label": "nope"}),
        ("post", "/api/v1/sessions/", {"bundle": "refunds", "version": 9}),
        ("get", f"/api/v1/sessions/{uuid.uuid4()}/", None),
        ("get", f"/api/v1/sessions/{uuid.uuid4()}/bundle/", None),
        ("post", f"/api/v1/sessions/{uuid.uuid4()}/heartbeat/", None),
        ("post", f"/api/v1/sessions/{uuid.uuid4()}/end/", None),
        # Names no bundle or label can have, including a NUL PostgreSQL cannot even compare.
        ("get", "/api/v1/bundles/a%00b/", None),
        ("get", "/api/v1/bundles/a%00b/versions/", None),
        ("get", "/api/v1/bundles/refunds/labels/a%00b/", None),
        ("get", "/api/v1/bundles/refunds/labels/a%00b/history/", None),
        ("post", "/api/v1/bundles/refunds/labels/a%00b/rollback/", {"reason": "r"}),
        ("get", "/api/v1/bundles/%ED%A0%80/", None),
    ],
)
def test_it_answers_an_unknown_bundle_version_label_or_session_with_404(ops, v1, production, method, path, body):
    with nothing_written():
        response = send(ops, method, path, body)
    assert_error(response, 404, "not_found")


def test_it_answers_a_version_of_another_bundle_as_unknown(ops, publisher, v1, production):
    other = bundle_create(name="billing", description="", actor=ops.actor)
    version_publish(bundle=other, content=content("billing"), message="b1", actor=ops.actor)
    version_publish(bundle=other, content=content("billing 2"), message="b2", actor=ops.actor)
    # refunds has only version 1; billing's version 2 must not be reachable through refunds.
    with nothing_written():
        get = ops.get("/api/v1/bundles/refunds/versions/2/")
        put = publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "r"})
        start = ops.post("/api/v1/sessions/", {"bundle": "refunds", "version": 2})
    for response in (get, put, start):
        assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/api/",
        "/api/v1/nope/",  # (/api/v1/ itself is the index: tests/api/test_index.py)
        "/api/v2/bundles/",
        "/api/v1/bundles/refunds/versions/abc/",
        "/api/v1/bundles/refunds/versions/-1/",
        "/api/v1/bundles/refunds/nope/",
        "/api/v1/sessions/not-a-uuid/",
        "/api/v1/sessions/not-a-uuid/bundle/",
    ],
)
def test_it_answers_an_unknown_path_under_api_with_a_json_404(agent, production, path):
    with nothing_written():
        with_key = agent.get(path)
        without_key = Api(None, None).get(path)
        posted = agent.post(path, {"bundle": "refunds"})
    for response in (with_key, without_key, posted):
        assert_error(response, 404, "not_found", details={})


def test_it_hides_another_keys_session_as_not_found(agent, session):
    other = make_api(Role.AGENT, "other-agent")
    publisher = make_api(Role.PUBLISHER, "a-publisher")
    for api in (other, publisher):
        with nothing_written():
            responses = [
                api.get(f"/api/v1/sessions/{session.pk}/"),
                api.get(f"/api/v1/sessions/{session.pk}/bundle/"),
                api.post(f"/api/v1/sessions/{session.pk}/heartbeat/"),
                api.post(f"/api/v1/sessions/{session.pk}/end/"),
            ]
        for response in responses:
            assert_error(response, 404, "not_found", details={})
    assert Session.objects.get(pk=session.pk).status == "active"


def forged_cursor(position: str) -> str:
    return b64encode(urlencode({"p": position}).encode()).decode()


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/api/v1/bundles/refunds/versions/", "not-a-cursor"),
        ("/api/v1/bundles/refunds/versions/", "\x00"),
        ("/api/v1/bundles/", "AAAA"),  # valid base64 of three NULs: DRF read it as page 1
        ("/api/v1/bundles/", "garbage!"),
        ("/api/v1/bundles/", b64encode(b"o=1").decode()),  # no position
        ("/api/v1/bundles/", b64encode(b"x=1&p=1").decode()),
        ("/api/v1/bundles/refunds/versions/", forged_cursor("abc")),
        ("/api/v1/bundles/refunds/versions/", forged_cursor("")),
        ("/api/v1/bundles/", forged_cursor("a\x00b")),
        ("/api/v1/bundles/refunds/labels/", forged_cursor("a\x00b")),
        ("/api/v1/bundles/refunds/labels/production/history/", forged_cursor("1.5")),
    ],
)
def test_it_answers_an_invalid_or_forged_cursor_with_400(agent, v2, production, path, cursor):
    with nothing_written():
        response = agent.get(path, QUERY_STRING=urlencode({"cursor": cursor}))
    assert_error(response, 400, "validation_error")
    assert list(response.json()["error"]["details"]) == ["cursor"]


# --- 405 method_not_allowed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", "/api/v1/bundles/"),
        ("put", "/api/v1/bundles/"),
        ("patch", "/api/v1/bundles/refunds/"),
        ("delete", "/api/v1/bundles/refunds/"),
        ("post", "/api/v1/bundles/refunds/"),
        ("put", "/api/v1/bundles/refunds/versions/1/"),
        ("delete", "/api/v1/bundles/refunds/versions/1/"),
        ("get", "/api/v1/bundles/refunds/versions/1/revoke/"),
        ("post", "/api/v1/bundles/refunds/labels/"),
        ("delete", "/api/v1/bundles/refunds/labels/production/"),
        ("patch", "/api/v1/bundles/refunds/labels/production/history/"),  # PATCH on the label itself sets its policy
        ("post", "/api/v1/bundles/refunds/labels/production/history/"),
        ("get", "/api/v1/bundles/refunds/labels/production/rollback/"),
        ("get", "/api/v1/sessions/"),
        ("delete", "/api/v1/sessions/{id}/"),
        ("post", "/api/v1/sessions/{id}/bundle/"),
        ("get", "/api/v1/sessions/{id}/heartbeat/"),
        ("get", "/api/v1/sessions/{id}/end/"),
    ],
)
def test_it_answers_an_unsupported_method_with_405(ops, session, method, path):
    path = path.replace("{id}", str(session.pk))
    with nothing_written():
        response = send(ops, method, path, {"reason": "r"} if method in ("post", "put") else None)
    assert_error(response, 405, "method_not_allowed", details={})
    assert method.upper() not in response["Allow"]


# --- 409 conflict -------------------------------------------------------------------------------


def test_it_answers_a_duplicate_bundle_name_with_409(publisher, bundle):
    with nothing_written():
        response = publisher.post("/api/v1/bundles/", {"name": "refunds", "description": "again"})
    assert_error(response, 409, "conflict")
    assert Bundle.objects.get(name="refunds").description == "Refund agent"


def test_it_answers_revoking_a_version_a_label_targets_with_409(ops, bundle, v1, v2, production):
    label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="stage")
    with nothing_written():
        response = ops.post("/api/v1/bundles/refunds/versions/1/revoke/", {"reason": "bad"})
    error = assert_error(response, 409, "conflict")
    assert sorted(error["details"]["labels"]) == ["production", "staging"]
    assert BundleVersion.objects.get(pk=v1.pk).state == "live"


def test_it_answers_rollback_with_no_previous_version_with_409(ops, production):
    with nothing_written():
        response = ops.post("/api/v1/bundles/refunds/labels/production/rollback/", {"reason": "undo"})
    assert_error(response, 409, "conflict")


def test_it_answers_rollback_to_the_current_version_with_409(ops, bundle, v1, v2, production):
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    with nothing_written():
        response = ops.post("/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 2, "reason": "again"})
    assert_error(response, 409, "conflict")


def test_it_answers_a_breaking_rollback_to_a_version_the_label_never_targeted_with_409(ops, bundle, v1, v2, production):
    broken = content("three")
    broken["tools"][0]["name"] = "issue_refund"  # v3 renames the tool: major against v2
    broken["system_prompt"] = "Call `issue_refund` after checking the order."
    version_publish(bundle=bundle, content=broken, message="v3", actor=ops.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    with nothing_written():
        response = ops.post(
            "/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 3, "reason": "forward"}
        )
    error = assert_error(response, 409, "conflict")
    assert error["details"]["level"] == "major"
    assert [c["kind"] for c in error["details"]["changes"]] == ["tool_renamed"]


def test_it_answers_moving_a_label_onto_a_revoked_version_with_409(ops, bundle, v1, v2, production):
    version_revoke(version=v2, actor=ops.actor, reason="bad")
    with nothing_written():
        response = ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship"})
        created = ops.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "stage"})
    assert_error(response, 409, "conflict")
    assert_error(created, 409, "conflict")


def test_it_answers_an_external_id_reused_on_another_bundle_with_409(ops, agent, bundle, v1, production):
    other = bundle_create(name="billing", description="", actor=ops.actor)
    bv1 = version_publish(bundle=other, content=content("billing"), message="b1", actor=ops.actor).version
    label_move(bundle=other, name="production", version=bv1, actor=ops.actor, reason="first")
    session_start(bundle=bundle, actor=agent.actor, external_id="conv-1")
    with nothing_written():
        response = agent.post("/api/v1/sessions/", {"bundle": "billing", "external_id": "conv-1"})
    assert_error(response, 409, "conflict")


def test_it_refuses_a_session_pinned_to_a_drained_version_with_409_and_the_labels(ops, agent, bundle, v1, v2):
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first")
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    assert BundleVersion.objects.get(pk=v1.pk).state == "drained"
    with nothing_written():
        response = agent.post("/api/v1/sessions/", {"bundle": "refunds", "version": 1})
    assert_error(response, 409, "conflict", details={"labels": {"production": 2}})


# --- 410 ----------------------------------------------------------------------------------------


def test_it_refuses_a_session_on_a_revoked_version_with_410_and_the_labels(ops, agent, bundle, v1, v2, production):
    version_revoke(version=v2, actor=ops.actor, reason="bad")
    with nothing_written():
        response = agent.post("/api/v1/sessions/", {"bundle": "refunds", "version": 2})
    assert_error(response, 410, "version_revoked", details={"labels": {"production": 1}})


def test_it_answers_heartbeat_and_fetch_of_an_ended_session_with_410(agent, session):
    session_end(session=session, actor=agent.actor)
    with nothing_written():
        heartbeat = agent.post(f"/api/v1/sessions/{session.pk}/heartbeat/")
        fetch = agent.get(f"/api/v1/sessions/{session.pk}/bundle/")
        conditional = agent.get(
            f"/api/v1/sessions/{session.pk}/bundle/", HTTP_IF_NONE_MATCH=f'"{session.version.content_hash}"'
        )
    for response in (heartbeat, fetch, conditional):
        assert_error(response, 410, "session_ended")


def test_it_answers_fetch_of_a_lapsed_session_with_410_and_records_the_expiry(agent, session):
    past = timezone.now() - timedelta(seconds=1)
    Session.objects.filter(pk=session.pk).update(expires_at=past)
    before = row_counts()
    response = agent.get(f"/api/v1/sessions/{session.pk}/bundle/")
    assert_error(response, 410, "session_ended")
    assert row_counts() == before
    assert Session.objects.get(pk=session.pk).status == "expired"


# --- anything else DRF or Django refuses -------------------------------------------------------


def test_it_renders_other_refusals_in_the_contract_shape_too(db):
    class Locked(APIException):
        status_code = 423
        default_code = "locked"
        default_detail = "The bundle is locked for maintenance."

    for exc, status, code in [
        (Locked(), 423, "locked"),
        (DjangoPermissionDenied(), 403, "permission_denied"),
    ]:
        with nothing_written():
            response = exception_handler(exc, {})
        assert response is not None
        assert_error(response, status, code, details={})


# --- 413 payload_too_large ----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), WRITE_ENDPOINTS)
def test_it_refuses_a_body_over_2_mib_with_413(ops, v2, production, method, path):
    body = json.dumps({"content": content("big", metadata={"pad": "x" * TWO_MIB}), "message": "m"}).encode()
    assert len(body) > TWO_MIB
    with nothing_written():
        response = send(ops, method, path, body)
    assert_error(response, 413, "payload_too_large", details=limits.TOO_LARGE_DETAILS)  # how to get under it


def test_it_refuses_a_body_one_byte_over_2_mib_but_reads_one_of_exactly_2_mib(publisher, bundle):
    def body_of(size: int) -> bytes:
        doc = {"content": content("big", metadata={"pad": ""}), "message": "m"}
        pad = size - len(json.dumps(doc).encode())
        doc["content"]["metadata"]["pad"] = "x" * pad
        data = json.dumps(doc).encode()
        assert len(data) == size
        return data

    with nothing_written():
        over = publisher.post("/api/v1/bundles/refunds/versions/", body_of(TWO_MIB + 1))
        exact = publisher.post("/api/v1/bundles/refunds/versions/", body_of(TWO_MIB))
    assert_error(over, 413, "payload_too_large")
    # Read and parsed: refused for its content (canonical form over 1 MiB), not its size.
    assert_field_errors(assert_error(exact, 400, "validation_error"), "content")


def test_it_refuses_an_oversize_body_before_authenticating(anonymous, bundle):
    with nothing_written():
        response = anonymous.post("/api/v1/sessions/", b"{" + b" " * TWO_MIB + b"}")
    assert_error(response, 413, "payload_too_large")


# --- 415 unsupported_media_type -----------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), WRITE_ENDPOINTS)
@pytest.mark.parametrize(
    ("content_type", "raw"),
    [
        ("text/plain", b'{"reason": "r"}'),
        ("application/x-www-form-urlencoded", b"reason=r&version=1"),
        ("application/xml", b"<reason>r</reason>"),
    ],
)
def test_it_refuses_a_body_that_is_not_json_with_415(ops, v2, production, method, path, content_type, raw):
    with nothing_written():
        response = send(ops, method, path, raw, content_type=content_type)
    assert_error(response, 415, "unsupported_media_type", details={})
