"""Fuzz the REST API from its own OpenAPI document with schemathesis, as each role.

Run by `make fuzz` (and .ci/run), not by `make test`: it is slower. FUZZ_EXAMPLES bounds the
examples per operation. Every response must be non-5xx and match the documented schema
(status code, content type, body), whatever the input."""

import json
import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from registry.services import bundle_create, label_move, version_publish
from sessions_app.services import session_start
from tests.conftest import content

# Each test walks every operation of the document as every role, one test function for all of
# them: minutes, not the suite's 300 s per test. pytest-timeout's signal would otherwise fail
# whichever operation happens to be running at 300 s, and hypothesis reports that as a flaky
# failure of that operation. The bound stays, sized for a slow CI machine.
pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]
# What the issue asks of every answer: no 5xx, and nothing outside the documented schema.
# (Not schemathesis's "schema-valid data must be accepted": the schema cannot express every
# rule, e.g. that a name holds no NUL, and a clear 400 is the right answer there.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))


@pytest.fixture
def api_schema(db):
    # Requests go through the WSGI app in-process, inside the test's transaction. Like Django's
    # test client, keep the handler from closing the test's connection after each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def keys(db) -> dict[str, str]:
    """A key per role, and something for them to find: a bundle with versions, labels, a session."""
    secrets = {role: api_key_create(name=f"fuzz-{role}", role=role, actor=SYSTEM)[1] for role in Role.values}
    bundle = bundle_create(name="refunds", description="fuzz target", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content("one"), message="v1", actor=SYSTEM).version
    version_publish(bundle=bundle, content=content("two"), message="v2", actor=SYSTEM)
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="fuzz")
    session_start(bundle=bundle, actor=SYSTEM)
    return secrets


def test_the_api_answers_every_generated_request_as_documented(api_schema, keys):
    """For each operation, generated requests (valid and not) sent as each role."""
    failures = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        def run(case) -> None:
            # What one role may do another must refuse, in the documented shape.
            for role in Role.values:
                case.call_and_validate(headers={"Authorization": f"Bearer {keys[role]}"}, checks=CHECKS)

        try:
            run()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"== {operation.label}: {type(exc).__name__}: {str(exc)[:3000]}")
    assert not failures, "\n\n".join(failures)


# What generated JSON rarely holds and clients do send: lone surrogates (valid JSON escapes that
# UTF-8 cannot encode), NUL, and keys too large to echo back. Put into request bodies as keys and
# as string values, and into query strings, on every operation.
HOSTILE = st.sampled_from(["\ud800", "\udfff", "x\udc80y", "\x00", "a\x00b", "k" * 50_000, "\ud83d\ude00\ud800"])


def _poison(value, hostile: str):
    """`value` with every string (key or value) replaced by `hostile`, keeping its shape."""
    if isinstance(value, str):
        return hostile
    if isinstance(value, dict):
        return {
            hostile if isinstance(k, str) and i == 0 else k: _poison(v, hostile)
            for i, (k, v) in enumerate(value.items())
        }
    if isinstance(value, list):
        return [_poison(v, hostile) for v in value]
    return value


def test_the_api_answers_hostile_strings_in_bodies_and_queries_as_documented(api_schema, keys):
    failures = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy(), key=HOSTILE, value=HOSTILE, poison_values=st.booleans())
        @settings(
            max_examples=max(3, EXAMPLES // 5), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
        )
        def run(case, key: str, value: str, poison_values: bool) -> None:
            extra = {}
            if isinstance(case.body, dict):
                body = _poison(case.body, value) if poison_values else dict(case.body)
                # Serialised here, as a client would send it: JSON escapes (\ud800) in ASCII.
                extra["data"] = json.dumps({**body, key: 1}).encode("ascii")
            if case.query:
                # A URL cannot carry a lone surrogate (it is percent-encoded UTF-8): NUL and size only.
                case.query = {name: value.encode("utf-8", "replace").decode() for name in case.query}
            for role in Role.values:
                case.call_and_validate(headers={"Authorization": f"Bearer {keys[role]}"}, checks=CHECKS, **extra)

        try:
            run()
        except Exception as exc:
            failures.append(f"== {operation.label}: {type(exc).__name__}: {str(exc)[:3000]}")
    assert not failures, "\n\n".join(failures)
