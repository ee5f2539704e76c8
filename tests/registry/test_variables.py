"""Variables in content: declarations, session and turn values, publish checks, and the render
of a version without knowledge packs (docs/rendering.md)."""

import hashlib
import json
from datetime import UTC, datetime

import pytest

from access.models import Role
from core.errors import InvalidContent
from knowledge.render import session_render
from registry.canonical import canonicalise
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from tests.conftest import content, make_api

DECLARED = {
    "customer": {"type": "string", "required": True, "description": "Customer name"},
    "tier": {"type": "enum", "values": ["free", "pro"], "default": "free"},
    "max_refund": {"type": "number", "default": 50},
    "strict": {"type": "boolean", "default": False},
    "ticket": {"type": "integer", "scope": "turn", "description": "Ticket being handled"},
    "timezone": {"type": "string", "default": "UTC"},
}
PROMPT = "Serve {{customer}} ({{ tier }} tier); refund up to {{max_refund}}; strict={{strict}}. Use {{tool:lookup}}."


def templated(**overrides):
    doc = content(PROMPT, variables=DECLARED, **overrides)
    doc["tools"][0]["name"] = "lookup"
    return doc


@pytest.fixture
def world(db):
    ops = make_api(Role.OPS)
    agent = make_api(Role.AGENT)
    bundle = bundle_create(name="tmpl", actor=ops.actor)
    version = version_publish(bundle=bundle, content=templated(), message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="r")
    return ops, agent


def start(agent, **body):
    return agent.post("/api/v1/sessions/", {"bundle": "tmpl", **body})


def render(agent, session_id, body=None):
    return agent.post(f"/api/v1/sessions/{session_id}/render/", body)


def test_it_keeps_content_without_variables_byte_identical_and_untemplated():
    doc = content("Hello {{name}} and {{tool:process_refund}}")
    _, data, _ = canonicalise(doc)
    assert b"variables" not in data and b"knowledge" not in data
    assert json.loads(data)["system_prompt"] == "Hello {{name}} and {{tool:process_refund}}"


def test_it_renders_content_without_variables_verbatim(db):
    ops, agent = make_api(Role.OPS), make_api(Role.AGENT)
    bundle = bundle_create(name="plain", actor=ops.actor)
    doc = content("Hello {{name}}, today.")
    version = version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="r")
    session = agent.post("/api/v1/sessions/", {"bundle": "plain"}).json()
    body = render(agent, session["id"]).json()
    assert body["prefix"] == {"system": "Hello {{name}}, today.", "tools": doc["tools"]}
    # Canonical JSON written out independently of registry.canonical: sorted keys, compact, UTF-8.
    canonical = json.dumps(body["prefix"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert body["prefix_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert (body["version"], body["content_hash"], body["notices"]) == (1, version.content_hash, [])


@pytest.mark.parametrize(
    ("declared", "path"),
    [
        ({"a": {"type": "date"}}, "content.variables.a.type"),
        ({"a": {"type": "enum"}}, "content.variables.a.values"),
        ({"a": {"type": "enum", "values": ["x", "x"]}}, "content.variables.a.values"),
        ({"a": {"type": "string", "values": ["x"]}}, "content.variables.a.values"),
        ({"a": {"type": "integer", "default": "3"}}, "content.variables.a.default"),
        ({"a": {"type": "string", "scope": "forever"}}, "content.variables.a.scope"),
        ({"a": {"type": "string", "required": "yes"}}, "content.variables.a.required"),
        ({"a": {"type": "string", "colour": "red"}}, "content.variables.a.colour"),
        ({"1a": {"type": "string"}}, "content.variables.1a"),
        ([], "content.variables"),
    ],
)
def test_it_refuses_invalid_declarations(declared, path):
    with pytest.raises(InvalidContent) as exc:
        canonicalise(content("x", variables=declared))
    assert path in exc.value.details


@pytest.mark.parametrize("packs", ["ops", ["Ops"], ["ops", "ops"], [1]])
def test_it_refuses_invalid_knowledge_lists(packs):
    with pytest.raises(InvalidContent) as exc:
        canonicalise(content("x", knowledge=packs))
    assert any(key.startswith("content.knowledge") for key in exc.value.details)


def test_publish_refuses_an_undeclared_reference_and_a_turn_variable_in_the_prompt(db):
    ops = make_api(Role.OPS)
    ops.post("/api/v1/bundles/", {"name": "checks"})
    doc = content("Hi {{who}} about {{ticket}}", variables={"ticket": {"type": "integer", "scope": "turn"}})
    response = ops.post("/api/v1/bundles/checks/versions/", {"content": doc, "message": "m"})
    assert response.status_code == 400
    messages = response.json()["error"]["details"]["content.system_prompt"]
    assert any("{{who}}" in m and "not declared" in m for m in messages)
    assert any("{{ticket}}" in m and "turn-scoped" in m for m in messages)


def test_publish_warns_about_a_date_like_session_variable_but_not_timezone(db):
    ops = make_api(Role.OPS)
    ops.post("/api/v1/bundles/", {"name": "dates"})
    declared = {
        "today": {"type": "string"},
        "start": {"type": "string", "description": "The session's start time"},
        "timezone": {"type": "string", "description": "The user's time zone"},
        "ticket_date": {"type": "string", "scope": "turn"},
    }
    response = ops.post(
        "/api/v1/bundles/dates/versions/",
        {"content": content("{{today}} {{start}}", variables=declared), "message": "m"},
    )
    assert response.status_code == 201
    # (the model catalog adds its own warning for this test's made-up model: not this test's subject)
    paths = sorted(w["path"] for w in response.json()["warnings"] if w["path"].startswith("content.variables"))
    assert paths == ["content.variables.start", "content.variables.today"]


def test_publish_refuses_a_bundle_tool_named_like_a_file_tool(db):
    ops = make_api(Role.OPS)
    ops.post("/api/v1/bundles/", {"name": "clash"})
    doc = content("Use `read`.", knowledge=["ops"])
    doc["tools"][0]["name"] = "read"
    response = ops.post("/api/v1/bundles/clash/versions/", {"content": doc, "message": "m"})
    assert response.status_code == 400
    assert "content.tools[0].name" in response.json()["error"]["details"]


def test_it_stores_session_variables_with_defaults_and_fills_the_prefix(world):
    _, agent = world
    response = start(agent, variables={"customer": "Ada", "max_refund": 12.5})
    assert response.status_code == 201, response.content
    session = response.json()
    assert session["variables"] == {
        "customer": "Ada",
        "max_refund": 12.5,
        "strict": False,
        "tier": "free",
        "timezone": "UTC",
    }
    body = render(agent, session["id"]).json()
    assert body["prefix"]["system"] == "Serve Ada (free tier); refund up to 12.5; strict=false. Use {{tool:lookup}}."


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({}, "customer"),  # required
        ({"customer": 5}, "customer"),
        ({"customer": "A", "tier": "gold"}, "tier"),
        ({"customer": "A", "strict": "no"}, "strict"),
        ({"customer": "A", "max_refund": True}, "max_refund"),
        ({"customer": "A", "ticket": 3}, "ticket"),  # turn-scoped, given at start
        ({"customer": "A", "colour": "red"}, "colour"),  # undeclared
        ({"customer": "A", "timezone": "Mars/Olympus"}, "timezone"),
    ],
)
def test_session_start_refuses_invalid_variables_naming_the_variable(world, variables, named):
    _, agent = world
    response = start(agent, variables=variables)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert f"variables.{named}" in error["details"]
    assert named in error["message"]
    assert Session.objects.count() == 0


def test_session_start_refuses_variables_for_a_version_that_declares_none(db, agent, production):
    response = agent.post("/api/v1/sessions/", {"bundle": "refunds", "variables": {"x": 1}})
    assert response.status_code == 400
    assert "variables.x" in response.json()["error"]["details"]


def test_session_start_refuses_variables_that_are_not_an_object(world):
    _, agent = world
    assert start(agent, variables=["customer"]).status_code == 400


def test_turn_variables_reach_the_tail_and_never_the_prefix(world):
    _, agent = world
    session = start(agent, variables={"customer": "Ada"}).json()
    first = render(agent, session["id"], {"variables": {"ticket": 4711}}).json()
    second = render(agent, session["id"], {"variables": {"ticket": 4712}}).json()
    assert first["prefix"] == second["prefix"] and first["prefix_sha256"] == second["prefix_sha256"]
    assert "4711" not in json.dumps(first["prefix"])
    assert "- ticket: 4711" in first["tail"] and "- ticket: 4712" in second["tail"]


@pytest.mark.parametrize("variables", [{"ticket": "x"}, {"customer": "Bob"}, {"nope": 1}, "x"])
def test_render_refuses_invalid_turn_variables(world, variables):
    _, agent = world
    session = start(agent, variables={"customer": "Ada"}).json()
    response = render(agent, session["id"], {"variables": variables})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_the_tail_has_the_date_and_time_in_utc_or_the_sessions_timezone(world):
    _, agent = world
    utc = start(agent, variables={"customer": "Ada"}).json()
    paris = start(agent, variables={"customer": "Ada", "timezone": "Europe/Paris"}).json()
    now = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    tail_utc = session_render(session_id=utc["id"], actor=agent.actor, now=now).tail
    tail_paris = session_render(session_id=paris["id"], actor=agent.actor, now=now).tail
    assert tail_utc.splitlines()[:2] == ["Current date: 2026-11-30", "Current time: 23:30 (UTC)"]
    assert tail_paris.splitlines()[:2] == ["Current date: 2026-12-01", "Current time: 00:30 (Europe/Paris)"]


def test_the_prefix_does_not_change_across_midnight(world):
    _, agent = world
    session = start(agent, variables={"customer": "Ada"}).json()
    before = session_render(session_id=session["id"], actor=agent.actor, now=datetime(2026, 11, 30, 23, 59, tzinfo=UTC))
    after = session_render(session_id=session["id"], actor=agent.actor, now=datetime(2026, 12, 1, 0, 1, tzinfo=UTC))
    assert before.prefix.body == after.prefix.body
    assert before.tail != after.tail


def test_render_is_refused_for_other_keys_and_ended_sessions(world):
    _, agent = world
    other = make_api(Role.AGENT, name="other")
    session = start(agent, variables={"customer": "Ada"}).json()
    assert render(other, session["id"]).status_code == 404
    agent.post(f"/api/v1/sessions/{session['id']}/end/")
    assert render(agent, session["id"]).status_code == 410


def test_render_refuses_unknown_fields(world):
    _, agent = world
    session = start(agent, variables={"customer": "Ada"}).json()
    assert render(agent, session["id"], {"vars": {}}).status_code == 400


@pytest.mark.parametrize(
    ("before", "after", "kind", "level"),
    [
        ({}, {"variables": {"a": {"type": "string"}}}, "variable_added", "minor"),
        ({}, {"variables": {"a": {"type": "string", "required": True}}}, "variable_added_required", "major"),
        ({"variables": {"a": {"type": "string"}}}, {"variables": {}}, "variable_removed", "major"),
        (
            {"variables": {"a": {"type": "string"}}},
            {"variables": {"a": {"type": "integer"}}},
            "variable_narrowed",
            "major",
        ),
        (
            {"variables": {"a": {"type": "enum", "values": ["x", "y"]}}},
            {"variables": {"a": {"type": "enum", "values": ["x"]}}},
            "variable_narrowed",
            "major",
        ),
        (
            {"variables": {"a": {"type": "enum", "values": ["x"]}}},
            {"variables": {"a": {"type": "enum", "values": ["x", "y"]}}},
            "variable_widened",
            "minor",
        ),
        (
            {"variables": {"a": {"type": "string", "description": "old"}}},
            {"variables": {"a": {"type": "string", "description": "new"}}},
            "variable_restated",
            "patch",
        ),
        ({}, {"knowledge": ["ops"]}, "knowledge_added", "minor"),
        ({"knowledge": ["ops", "kb"]}, {"knowledge": ["ops"]}, "knowledge_removed", "major"),
    ],
)
def test_the_diff_classifies_changes_of_variables_and_packs(db, before, after, kind, level):
    ops = make_api(Role.OPS)
    ops.post("/api/v1/bundles/", {"name": "diffs"})
    assert (
        ops.post("/api/v1/bundles/diffs/versions/", {"content": content("p", **before), "message": "1"}).status_code
        == 201
    )
    assert (
        ops.post("/api/v1/bundles/diffs/versions/", {"content": content("p", **after), "message": "2"}).status_code
        == 201
    )
    diff = ops.get("/api/v1/bundles/diffs/versions/2/diff/").json()
    assert [(c["kind"], c["level"]) for c in diff["changes"]] == [(kind, level)]
    assert diff["level"] == level


def test_values_and_names_that_are_not_valid_unicode_are_a_400(world):
    _, agent = world
    body = '{"bundle": "tmpl", "variables": {"customer": "\\ud800"}}'
    response = agent.post("/api/v1/sessions/", body)
    assert response.status_code == 400 and "variables.customer" in response.json()["error"]["details"]
    body = '{"bundle": "tmpl", "variables": {"customer": "A", "\\ud800": 1}}'
    assert agent.post("/api/v1/sessions/", body).status_code == 400
    session = start(agent, variables={"customer": "Ada"}).json()
    response = agent.post(f"/api/v1/sessions/{session['id']}/render/", '{"variables": {"ticket": "\\ud800"}}')
    assert response.status_code == 400
