"""Required checks: a `ci` key reports checks for a version's content hash, and a label whose
policy requires them refuses a move to content without a success of each. Through the API
with real keys."""

import json

import pytest

from access.models import Role
from registry.services import label_move, label_policy_set, version_publish
from tests.conftest import content, make_api
from webhooks.models import Delivery, Endpoint

pytestmark = pytest.mark.django_db

BUNDLE = "/api/v1/bundles/refunds"


@pytest.fixture
def ci(db):
    return make_api(Role.CI, "ci-pipeline")


def patch(api, path, body):
    return api.client.patch(path, data=json.dumps(body), content_type="application/json")


def gate(bundle, ops, label="production", checks=("evals",)):
    label_policy_set(
        bundle=bundle, name=label, changes={"required_checks": list(checks)}, actor=ops.actor, reason="gate"
    )


def report(api, number, name="evals", status="success", **extra):
    return api.post(f"{BUNDLE}/versions/{number}/checks/", {"name": name, "status": status, **extra})


def test_a_ci_key_reports_a_check_bound_to_the_content_hash(ci, v1):
    answer = report(ci, 1, summary="0.93 on 200 cases", details_url="https://ci.example/run/7")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["content_hash"] == v1.content_hash
    assert body["version"] == 1
    assert body["reported_by"] == ci.actor.name
    assert (body["name"], body["status"], body["summary"]) == ("evals", "success", "0.93 on 200 cases")


def test_the_list_shows_the_latest_report_per_name(ci, agent, v1):
    report(ci, 1, status="pending")
    report(ci, 1, status="failure")
    report(ci, 1, name="lint", status="success")
    listed = agent.get(f"{BUNDLE}/versions/1/checks/").json()["results"]
    assert [(c["name"], c["status"]) for c in listed] == [("evals", "failure"), ("lint", "success")]


def test_a_ci_key_can_do_nothing_else(ci, v1):
    assert ci.get(f"{BUNDLE}/").status_code == 403
    assert ci.get(f"{BUNDLE}/versions/1/").status_code == 403
    assert ci.post("/api/v1/sessions/", {"bundle": "refunds"}).status_code == 403
    assert ci.put(f"{BUNDLE}/labels/staging/", {"version": 1, "reason": "r"}).status_code == 403
    # MCP: tests/mcp_server/test_mcp.py::test_mcp_over_http_refuses_a_ci_key


def test_a_publisher_cannot_certify_its_own_version(publisher, v1):
    answer = report(publisher, 1)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "permission_denied"


def test_a_scoped_ci_key_sees_no_other_bundle(v1):
    from access.actors import SYSTEM
    from access.services import api_key_create
    from tests.conftest import Api

    key, secret = api_key_create(name="ci-billing", role=Role.CI, scopes=["billing-*"], actor=SYSTEM)
    assert report(Api(secret, key.as_actor()), 1).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"name": "Evals", "status": "success"},
        {"name": "e" * 65, "status": "success"},
        {"name": "evals", "status": "passed"},
        {"name": "evals", "status": "success", "summary": "x" * 2001},
        {"name": "evals", "status": "success", "details_url": "ftp://ci.example/run"},
        {"name": "evals", "status": "success", "details_url": "https://ci.example/" + "x" * 2000},
        {"name": "evals", "status": "success", "summary": "a\x00b"},
        {"name": 7, "status": "success"},
        {"status": "success"},
        {"name": "evals", "status": "success", "extra": 1},
    ],
)
def test_invalid_reports_are_400_in_the_contract_shape(ci, v1, body):
    answer = ci.post(f"{BUNDLE}/versions/1/checks/", body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "validation_error"


def test_a_required_check_blocks_a_move_until_it_succeeds(ci, ops, bundle, production, v2):
    gate(bundle, ops)
    move = {"version": 2, "reason": "ship v2"}
    refused = ops.put(f"{BUNDLE}/labels/production/", move)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "checks_required"
    assert error["details"]["missing"] == ["evals"]
    assert error["details"]["version"] == 2

    report(ci, 2, status="failure")
    failing = ops.put(f"{BUNDLE}/labels/production/", move).json()["error"]
    assert failing["details"]["failing"] == [{"name": "evals", "status": "failure"}]
    assert failing["details"]["missing"] == []

    report(ci, 2, status="success")
    assert ops.put(f"{BUNDLE}/labels/production/", move).status_code == 200


def test_a_success_is_for_those_bytes_not_for_a_version_number(ci, ops, bundle, production, v2):
    gate(bundle, ops)
    report(ci, 1)  # v1's bytes passed; v2's did not
    assert ops.put(f"{BUNDLE}/labels/production/", {"version": 2, "reason": "ship"}).status_code == 409


def test_a_rollback_to_a_former_target_is_allowed(ci, ops, bundle, production, v2):
    report(ci, 2)
    assert ops.put(f"{BUNDLE}/labels/production/", {"version": 2, "reason": "ship"}).status_code == 200
    gate(bundle, ops)  # v1 never passed, but production targeted it before
    back = ops.post(f"{BUNDLE}/labels/production/rollback/", {"reason": "v2 misbehaves"})
    assert back.status_code == 200, back.content
    assert back.json()["version"] == 1


def test_a_split_and_a_release_are_gated_too(ci, ops, bundle, production, v2):
    gate(bundle, ops)
    split = {"targets": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}], "reason": "ramp"}
    assert ops.put(f"{BUNDLE}/labels/production/", split).json()["error"]["code"] == "checks_required"
    release = {"moves": [{"bundle": "refunds", "label": "production", "version": 2}], "reason": "ship"}
    preview = ops.post("/api/v1/releases/", {**release, "dry_run": True}).json()["moves"][0]
    assert preview["allowed"] is False
    assert preview["checks"] == [
        {"version": 2, "required": ["evals"], "missing": ["evals"], "failing": [], "rollback": False, "passes": False}
    ]
    applied = ops.post("/api/v1/releases/", release)
    assert applied.status_code == 409
    assert applied.json()["error"]["code"] == "checks_required"
    report(ci, 2)
    assert ops.post("/api/v1/releases/", {**release, "dry_run": True}).json()["moves"][0]["allowed"] is True
    assert ops.post("/api/v1/releases/", release).status_code == 201


def test_labels_without_required_checks_move_as_before(ops, bundle, production, v2):
    assert ops.put(f"{BUNDLE}/labels/production/", {"version": 2, "reason": "ship"}).status_code == 200


def test_a_completed_check_is_announced_by_webhook(ci, v1):
    endpoint = Endpoint.objects.create(url="https://hooks.example/x", events=["check.completed"], created_by="t")
    report(ci, 1, status="pending")
    report(ci, 1, status="success")
    deliveries = list(Delivery.objects.filter(endpoint=endpoint))
    assert len(deliveries) == 1  # pending is not completed
    data = deliveries[0].payload["data"]
    assert (data["name"], data["status"], data["content_hash"]) == ("evals", "success", v1.content_hash)


def test_the_same_bytes_in_a_new_version_number_keep_their_checks(ci, ops, bundle, v1):
    # Publishing identical content returns the same version: the check follows the hash.
    again = version_publish(bundle=bundle, content=content(), message="again", actor=ops.actor).version
    assert again.pk == v1.pk
    report(ci, 1)
    label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="r")
    assert ops.get(f"{BUNDLE}/versions/1/checks/").json()["results"][0]["content_hash"] == v1.content_hash
