"""A database outage answers 503 `unavailable` with Retry-After on every endpoint, not 500.

The outage is real: the test points the connection at a port where nothing listens (what a
stopped PostgreSQL looks like to the app), then restores it and checks the next request works."""

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)
SESSION = "00000000-0000-4000-8000-000000000000"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


@contextmanager
def database_down() -> Iterator[None]:
    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT")}
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def _every_operation(client: Client) -> list[tuple[str, str]]:
    """(method, path) of every operation in the OpenAPI document, placeholders filled."""
    import yaml

    schema = yaml.safe_load(client.get("/api/schema/").content)
    fill = {
        "session_id": SESSION,
        "release_id": SESSION,
        "change_id": SESSION,  # a change request's id (a UUID, as the route requires)
        "run_id": SESSION,  # an evaluation run's id (a UUID)
        "job_id": SESSION,  # an evaluation job's id (a UUID)
        "name": "refunds",
        "label": "production",
        "tool": "ls",
        "path": "notes.md",
    }
    operations = []
    for template, methods in schema["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: fill.get(m.group(1), "1"), template)
        operations += [(method, path) for method in methods if method in {"get", "post", "put", "patch", "delete"}]
    return operations


def test_it_answers_503_unavailable_on_every_endpoint_while_the_database_is_down():
    _, secret = api_key_create(name="outage", role=Role.ADMIN, actor=SYSTEM)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", raise_request_exception=False)
    operations = _every_operation(client)
    browser = Client(raise_request_exception=False)
    browser.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw-outage-test"))
    assert len(operations) > 15
    with database_down():
        answers = {
            (m, p): client.generic(m.upper(), p, data=b"{}" if m != "get" else b"", content_type="application/json")
            for m, p in operations
        }
        page = browser.get("/admin/")  # not DRF: Django's own handler (the session is in the database)
        login = Client(raise_request_exception=False).post("/admin/login/", {"username": "a", "password": "b"})
    wrong = [
        f"{m.upper()} {p}: {r.status_code} {r.content[:100]!r}" for (m, p), r in answers.items() if r.status_code != 503
    ]
    assert not wrong, "\n".join(wrong)
    for response in answers.values():
        assert response.json()["error"]["code"] == "unavailable"
        assert response["Retry-After"] == "5"
    for response in (page, login):
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
        assert response["Retry-After"] == "5"
    # Recovery: the next request reconnects.
    assert client.get("/api/v1/bundles/").status_code == 200
