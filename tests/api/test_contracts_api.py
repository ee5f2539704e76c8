"""Issue 5 through the REST API: the realistic bundles, publish warnings and errors with exact
paths, the diff endpoint, and the compatibility policy of labels (with its rollback exemption)."""

import pytest

from access.models import Role
from audit.models import AuditEvent
from registry.models import BundleVersion, Label
from tests.conftest import make_api
from tests.fixtures.realistic_bundles import BUNDLES


@pytest.fixture
def ops(db):
    return make_api(Role.OPS, name="contract-ops")


def _publish(api, bundle: str, doc: dict, message: str):
    return api.post(f"/api/v1/bundles/{bundle}/versions/", {"content": doc, "message": message})


def _start(api, case: dict) -> None:
    assert api.post("/api/v1/bundles/", {"name": case["bundle"], "description": case["description"]}).status_code == 201
    assert _publish(api, case["bundle"], case["before"], "before").status_code == 201
    moved = api.put(f"/api/v1/bundles/{case['bundle']}/labels/production/", {"version": 1, "reason": "launch"})
    assert moved.status_code == 201


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_each_realistic_bundle_is_refused_or_flagged_through_the_api(ops, name):
    case = BUNDLES[name]
    _start(ops, case)
    response = _publish(ops, case["bundle"], case["after"], "after")
    if case["errors"]:
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert sorted(error["details"]) == sorted(f"content.{path}" for path in case["errors"])
        assert BundleVersion.objects.filter(bundle__name=case["bundle"]).count() == 1  # nothing written
        return
    assert response.status_code == 201
    assert [w["path"] for w in response.json()["warnings"]] == [f"content.{p}" for p in case["warnings"]]
    diff = ops.get(f"/api/v1/bundles/{case['bundle']}/versions/2/diff/").json()
    assert (diff["from_version"], diff["to_version"], diff["level"]) == (1, 2, case["level"])
    assert [{"kind": c["kind"], "path": c["path"]} for c in diff["changes"]] == case["changes"]
    move = ops.put(f"/api/v1/bundles/{case['bundle']}/labels/production/", {"version": 2, "reason": "ship"})
    if case["level"] == "major":
        assert move.status_code == 409
        assert move.json()["error"]["code"] == "conflict"
        assert move.json()["error"]["details"]["level"] == "major"
        assert {c["kind"] for c in move.json()["error"]["details"]["changes"]} <= {c["kind"] for c in case["changes"]}
        assert Label.objects.get(bundle__name=case["bundle"], name="production").version.number == 1
    else:
        assert move.status_code == 200


def test_a_prompt_naming_a_missing_tool_is_refused_with_an_actionable_message(ops):
    case = BUNDLES["refund_agent_rename"]
    _start(ops, case)
    error = _publish(ops, case["bundle"], case["after"], "after").json()["error"]
    [message] = error["details"]["content.system_prompt"]
    assert "process_refund" in message and "issue_refund" in message  # names the stale tool and the new one


def test_an_invalid_schema_names_the_exact_place(ops):
    case = BUNDLES["refund_agent_broken_schemas"]
    _start(ops, case)
    details = _publish(ops, case["bundle"], case["after"], "after").json()["error"]["details"]
    assert "content.tools[1].input_schema.properties.amount.type" in details
    assert "money" in " ".join(details["content.tools[1].input_schema.properties.amount.type"])


def test_a_breaking_move_is_allowed_with_allow_breaking_and_the_history_says_so(ops):
    case = BUNDLES["safety_policy_tightened"]
    _start(ops, case)
    assert _publish(ops, case["bundle"], case["after"], "tighten").status_code == 201
    path = f"/api/v1/bundles/{case['bundle']}/labels/production/"
    moved = ops.put(path, {"version": 2, "reason": "legal asked for it", "allow_breaking": True})
    assert moved.status_code == 200
    history = ops.get(path + "history/").json()["results"]
    assert history[0]["reason"] == "legal asked for it"
    assert history[0]["note"].startswith("breaking change allowed (allow_breaking)")
    assert AuditEvent.objects.filter(action="label.moved").latest("id").data["note"] == history[0]["note"]


def test_a_rollback_is_exempt_and_the_history_records_why(ops):
    case = BUNDLES["safety_policy_tightened"]
    _start(ops, case)
    _publish(ops, case["bundle"], case["after"], "tighten")
    path = f"/api/v1/bundles/{case['bundle']}/labels/production/"
    ops.put(path, {"version": 2, "reason": "ship", "allow_breaking": True})
    # Whatever the reverse diff says, going back returns to a state this label already served,
    # so the check does not apply.
    back = ops.post(path + "rollback/", {"reason": "undo"})
    assert back.status_code == 200 and back.json()["version"] == 1
    note = ops.get(path + "history/").json()["results"][0]["note"]
    assert note.startswith("compatibility check not applied") and "rollback" in note
    again = ops.put(path, {"version": 2, "reason": "re-ship"})  # also a previous target: exempt
    assert again.status_code == 200


def test_a_compatible_move_records_that_the_check_passed(ops):
    case = BUNDLES["sales_assistant_persona"]
    _start(ops, case)
    _publish(ops, case["bundle"], case["after"], "persona")
    path = f"/api/v1/bundles/{case['bundle']}/labels/production/"
    assert ops.put(path, {"version": 2, "reason": "friendlier"}).status_code == 200
    assert (
        ops.get(path + "history/").json()["results"][0]["note"] == "compatibility check passed: patch against version 1"
    )


def test_only_production_requires_compatibility_by_default_and_labels_can_opt_in(ops):
    case = BUNDLES["safety_policy_tightened"]
    _start(ops, case)
    _publish(ops, case["bundle"], case["after"], "tighten")
    base = f"/api/v1/bundles/{case['bundle']}/labels/"
    staging = ops.put(base + "staging/", {"version": 1, "reason": "stage"}).json()
    assert staging["compatibility"] == "none"
    assert ops.put(base + "staging/", {"version": 2, "reason": "try"}).status_code == 200
    canary = ops.put(base + "canary/", {"version": 1, "reason": "c", "compatibility": "backward"}).json()
    assert canary["compatibility"] == "backward"
    assert ops.put(base + "canary/", {"version": 2, "reason": "c2"}).status_code == 409
    labels = {label["name"]: label["compatibility"] for label in ops.get(base).json()["results"]}
    assert labels == {"canary": "backward", "production": "backward", "staging": "none"}


def test_the_diff_endpoint_defaults_to_the_previous_version_and_validates_against(ops):
    case = BUNDLES["sales_assistant_persona"]
    _start(ops, case)
    _publish(ops, case["bundle"], case["after"], "persona")
    base = f"/api/v1/bundles/{case['bundle']}/versions/"
    assert ops.get(base + "2/diff/?against=2").json() == {
        "bundle": case["bundle"],
        "from_version": 2,
        "to_version": 2,
        "level": "patch",
        "changes": [],
    }
    reverse = ops.get(base + "1/diff/?against=2").json()
    assert (reverse["from_version"], reverse["to_version"]) == (2, 1)
    first = ops.get(base + "1/diff/")
    assert (first.status_code, first.json()["error"]["code"]) == (400, "validation_error")
    assert ops.get(base + "2/diff/?against=9").status_code == 404
    assert ops.get(base + "2/diff/?against=x").status_code == 400


@pytest.mark.parametrize("value", ["true", 1, None])
def test_allow_breaking_must_be_a_boolean(ops, value):
    case = BUNDLES["sales_assistant_persona"]
    _start(ops, case)
    response = ops.put(
        f"/api/v1/bundles/{case['bundle']}/labels/production/", {"version": 1, "reason": "r", "allow_breaking": value}
    )
    assert (response.status_code, response.json()["error"]["code"]) == (400, "validation_error")
    assert "allow_breaking" in response.json()["error"]["details"]


def test_the_documented_table_is_the_rules_the_code_uses():
    from pathlib import Path

    from registry.contracts import COMPATIBILITY_RULES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text()
    rows = {line for line in doc.splitlines() if line.startswith("| `")}
    for kind, level, rule in COMPATIBILITY_RULES:
        assert f"| `{kind}` | {level} | {rule} |" in rows, kind
    documented = {row.split("`")[1] for row in rows}
    assert documented == {kind for kind, _, _ in COMPATIBILITY_RULES}, "the table documents a kind the code lacks"
