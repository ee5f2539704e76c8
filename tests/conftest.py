"""Shared fixtures. Every test talks to a real PostgreSQL (and, where it enqueues, a real
Redis): `make test` starts them, or points at DATABASE_URL / REDIS_URL."""

import copy
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from registry.canonical import canonical_bytes
from registry.models import Bundle, BundleVersion
from registry.services import bundle_create, label_move, version_publish

CONTENT_V1: dict[str, Any] = {
    "system_prompt": "You are a refund agent. Call `process_refund` after checking the order.",
    "tools": [
        {
            "name": "process_refund",
            "description": "Refund an order.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id"],
            },
        }
    ],
    "model": {"name": "m-1", "temperature": 0},
}


def content(prompt: str = "", **overrides: Any) -> dict[str, Any]:
    """A valid content document; `prompt` makes it distinct."""
    doc = copy.deepcopy(CONTENT_V1)
    if prompt:
        doc["system_prompt"] = prompt
    doc.update(overrides)
    return doc


def pinned_body(version: BundleVersion) -> bytes:
    """What GET /sessions/{id}/bundle/ must answer for a session pinned to `version`, computed
    independently of the server: the canonical JSON of the envelope."""
    return canonical_bytes(
        {
            "bundle": version.bundle.name,
            "version": version.number,
            "content_hash": version.content_hash,
            "content": json.loads(bytes(version.canonical)),
        }
    )


class Api:
    """A JSON client bound to one API key."""

    def __init__(self, secret: str | None, actor) -> None:
        self.client = APIClient()
        self.actor = actor
        self.secret = secret
        if secret:
            self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def _send(self, method: str, path: str, body: Any = None, **extra: Any):
        kwargs: dict[str, Any] = dict(extra)
        if body is not None:
            kwargs["data"] = body if isinstance(body, (bytes, str)) else json.dumps(body)
            kwargs.setdefault("content_type", "application/json")
        return getattr(self.client, method)(path, **kwargs)

    def get(self, path: str, **extra: Any):
        return self._send("get", path, **extra)

    def post(self, path: str, body: Any = None, **extra: Any):
        return self._send("post", path, body, **extra)

    def put(self, path: str, body: Any = None, **extra: Any):
        return self._send("put", path, body, **extra)

    def patch(self, path: str, body: Any = None, **extra: Any):
        return self._send("patch", path, body, **extra)


def make_api(role: str, name: str | None = None) -> Api:
    key, secret = api_key_create(name=name or f"test-{role}", role=role, actor=SYSTEM)
    return Api(secret, key.as_actor())


@pytest.fixture
def agent(db) -> Api:
    return make_api(Role.AGENT)


@pytest.fixture
def publisher(db) -> Api:
    return make_api(Role.PUBLISHER)


@pytest.fixture
def ops(db) -> Api:
    return make_api(Role.OPS)


@pytest.fixture
def anonymous(db) -> Api:
    return Api(None, None)


@pytest.fixture
def bundle(db, ops) -> Bundle:
    return bundle_create(name="refunds", description="Refund agent", actor=ops.actor)


@pytest.fixture
def v1(bundle, ops) -> BundleVersion:
    version = version_publish(bundle=bundle, content=content(), message="v1", actor=ops.actor).version
    return version


@pytest.fixture
def v2(bundle, ops, v1) -> BundleVersion:
    version = version_publish(bundle=bundle, content=content("Version two."), message="v2", actor=ops.actor).version
    return version


@pytest.fixture
def production(bundle, ops, v1):
    """`production` -> v1."""
    label, _ = label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first release")
    return label


@pytest.fixture(autouse=True)
def _model_catalog_fresh():
    """Each process keeps the merged model catalog for a while (modelcatalog.selectors); the
    tables are emptied between tests, so a test's overrides must not outlive it."""
    from modelcatalog.selectors import catalog_invalidate

    catalog_invalidate()
    yield
    catalog_invalidate()
