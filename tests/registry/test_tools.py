"""Tool signatures: indexed at publish, GET /tools/ and /tools/{name}/ (scope, counts, states,
the side-by-side diff), and the backfill of versions published without an index."""

import copy

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from registry import lifecycle
from registry.models import ToolSignature, VersionTool
from registry.services import bundle_create, label_move, version_publish
from registry.tool_signatures import signature_of
from sessions_app.services import session_end, session_start
from tests.conftest import Api, content

REFUND_SCHEMA = content()["tools"][0]["input_schema"]


def with_schema(prompt: str, schema: dict, description: str = "Refund an order.") -> dict:
    doc = content(prompt)
    doc["tools"] = [{"name": "process_refund", "description": description, "input_schema": schema}]
    return doc


def stricter() -> dict:
    schema = copy.deepcopy(REFUND_SCHEMA)
    schema["properties"]["reason"] = {"type": "string"}
    schema["required"] = ["order_id", "reason"]
    return schema


def signatures(version) -> list[tuple[str, str]]:
    return list(
        VersionTool.objects.filter(version=version)
        .order_by("position")
        .values_list("signature__name", "signature__schema_hash")
    )


def test_it_indexes_each_tool_signature_in_the_publish(v1):
    [(name, digest)] = signatures(v1)
    assert name == "process_refund"
    assert digest == signature_of(content()["tools"][0]).schema_hash
    assert ToolSignature.objects.get(name=name, schema_hash=digest).schema == {"input_schema": REFUND_SCHEMA}


def test_it_shares_a_signature_between_versions_whose_schema_is_the_same(bundle, v1, ops):
    reworded = version_publish(
        bundle=bundle, content=with_schema("Two.", REFUND_SCHEMA, "Refund it."), message="m", actor=ops.actor
    ).version
    changed = version_publish(bundle=bundle, content=with_schema("Three.", stricter()), message="m", actor=ops.actor)
    assert signatures(reworded) == signatures(v1)  # a description is wording, not the signature
    assert signatures(changed.version) != signatures(v1)
    assert ToolSignature.objects.filter(name="process_refund").count() == 2


def test_the_output_schema_is_part_of_the_signature():
    tool = content()["tools"][0]
    with_output = {**tool, "output_schema": {"type": "object"}}
    assert signature_of(tool).schema_hash != signature_of(with_output).schema_hash


def test_it_lists_a_signature_with_its_bundles_versions_sessions_and_state(bundle, production, v1, agent, ops):
    session_start(bundle=bundle, actor=agent.actor)
    session_start(bundle=bundle, actor=agent.actor)
    body = agent.get("/api/v1/tools/").json()
    [row] = body["results"]
    assert (row["name"], row["state"], row["sessions_active"]) == ("process_refund", "live", 2)
    assert row["bundles"] == [
        {
            "name": "refunds",
            "versions": [{"version": 1, "state": "live", "labels": ["production"], "sessions_active": 2}],
        }
    ]
    assert row["first_seen_at"] == row["last_seen_at"] is not None
    assert body["next"] is None


def test_a_signature_drains_when_no_label_targets_it_and_its_last_session_ends(
    bundle, production, v1, agent, ops, django_capture_on_commit_callbacks
):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    v2 = version_publish(bundle=bundle, content=with_schema("Two.", stricter()), message="m", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2", allow_breaking=True)
    states = {
        (r["schema_hash"][:8], r["state"], r["sessions_active"]) for r in agent.get("/api/v1/tools/").json()["results"]
    }
    old, new = signatures(v1)[0][1][:8], signatures(v2)[0][1][:8]
    assert states == {(old, "draining", 1), (new, "live", 0)}
    session_end(session=session, actor=agent.actor)
    lifecycle.version_drain(version_id=v1.pk)
    states = {
        (r["schema_hash"][:8], r["state"], r["sessions_active"]) for r in agent.get("/api/v1/tools/").json()["results"]
    }
    assert states == {(old, "drained", 0), (new, "live", 0)}


def test_a_key_sees_only_the_tools_of_bundles_it_may_read(bundle, production, v1, ops):
    other = bundle_create(name="billing", actor=ops.actor)
    doc = content("Billing.")
    doc["tools"] = [{"name": "charge_card", "description": "Charge.", "input_schema": {"type": "object"}}]
    doc["system_prompt"] = "Billing agent."
    version_publish(bundle=other, content=doc, message="m", actor=ops.actor)
    key, secret = api_key_create(name="billing-only", role=Role.AGENT, actor=SYSTEM, scopes=["billing"])
    scoped = Api(secret, key.as_actor())
    assert [r["name"] for r in scoped.get("/api/v1/tools/").json()["results"]] == ["charge_card"]
    assert scoped.get("/api/v1/tools/process_refund/").status_code == 404
    assert scoped.get("/api/v1/tools/charge_card/").status_code == 200


def test_a_tools_signatures_are_shown_side_by_side_with_the_schema_diff(bundle, v1, agent, ops):
    version_publish(bundle=bundle, content=with_schema("Two.", stricter()), message="m", actor=ops.actor)
    body = agent.get("/api/v1/tools/process_refund/").json()
    assert [s["schema"]["input_schema"]["required"] for s in body["signatures"]] == [
        ["order_id"],
        ["order_id", "reason"],
    ]
    [diff] = body["diffs"]
    assert (diff["from_hash"], diff["to_hash"]) == (
        body["signatures"][0]["schema_hash"],
        body["signatures"][1]["schema_hash"],
    )
    assert diff["level"] == "major"
    assert "parameter_added_required" in {c["kind"] for c in diff["changes"]}


@pytest.mark.parametrize("path", ["/api/v1/tools/nope/", "/api/v1/tools/a%00b/", "/api/v1/tools/" + "x" * 5000 + "/"])
def test_an_unknown_or_unstorable_tool_name_is_a_404_in_the_error_shape(v1, agent, path):
    response = agent.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_forged_cursor_is_a_400(v1, agent):
    response = agent.get("/api/v1/tools/?cursor=AAAA")
    assert response.status_code == 400
    assert "cursor" in response.json()["error"]["details"]


def test_the_backfill_indexes_a_version_published_without_its_tools(bundle, v1):
    before = signatures(v1)
    VersionTool.objects.filter(version=v1).delete()
    assert lifecycle.tool_edges_backfill() == 1
    assert signatures(v1) == before
    assert lifecycle.tool_edges_backfill() == 0  # idempotent


def test_a_tools_page_costs_the_same_queries_however_many_versions_carry_its_signatures(
    bundle, production, v1, agent, ops
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert agent.get("/api/v1/tools/").status_code == 200
        return len(captured.captured_queries)

    queries()  # the first call of a key also records its use
    before = queries()
    for n in range(12):  # twelve more versions carrying the same signature, two of them live
        version = version_publish(bundle=bundle, content=content(f"Prompt {n}."), message="m", actor=ops.actor).version
        if n < 2:
            label_move(bundle=bundle, name=f"l{n}", version=version, actor=ops.actor, reason="r")
    assert queries() == before


def test_the_migrations_backfill_writes_the_signatures_and_states_the_publish_would(bundle, production, v1, ops):
    import importlib

    from django.db import connection

    backfill = importlib.import_module("registry.migrations.0018_backfill_tool_signatures").backfill
    v2 = version_publish(bundle=bundle, content=with_schema("Two.", stricter()), message="m", actor=ops.actor).version
    before = {v.pk: signatures(v) for v in (v1, v2)}
    VersionTool.objects.all().delete()
    ToolSignature.objects.all().delete()
    with connection.schema_editor() as editor:
        backfill(None, editor)
        backfill(None, editor)  # a retry adds nothing
    assert {v.pk: signatures(v) for v in (v1, v2)} == before
    states = dict(ToolSignature.objects.values_list("schema_hash", "state"))
    assert states == {before[v1.pk][0][1]: "live", before[v2.pk][0][1]: "unreleased"}
    assert VersionTool.objects.count() == 2
