"""Governance protects what agents run, not only what labels target (issue 36, Medium): a pin
by number (`POST /sessions/ {"version": N}`) is refused, 403 `pin_not_allowed`, for a version
that has not passed the strictest policy of the bundle's labels (their required checks and
approvals), unless the bundle's ops granted "pin any version" to the caller's role or key.
Every pin by number is audited."""

import json

import pytest

from access.models import Role
from audit.models import AuditEvent
from registry.services import check_report, label_policy_set
from tests.conftest import make_api

pytestmark = pytest.mark.django_db

POLICY = "/api/v1/bundles/refunds/pin-policy/"


def pin(api, number: int):
    return api.post("/api/v1/sessions/", {"bundle": "refunds", "version": number})


@pytest.fixture
def governed(bundle, production, v1, v2, ops):
    """production -> v1 (released before the policy), then production requires check `ci`."""
    label_policy_set(bundle=bundle, name="production", changes={"required_checks": ["ci"]}, actor=ops.actor, reason="r")
    return bundle


def test_it_refuses_to_pin_by_number_a_version_that_failed_the_labels_checks(governed, v2, agent, ops):
    ci = make_api(Role.CI, "pipeline")
    check_report(version=v2, name="ci", status="failure", actor=ci.actor)
    answer = pin(agent, 2)
    assert answer.status_code == 403, answer.content
    error = answer.json()["error"]
    assert error["code"] == "pin_not_allowed"
    (refusal,) = error["details"]["labels"]
    assert refusal["label"] == "production"
    assert refusal["checks"]["failing"] == [{"name": "ci", "status": "failure"}]
    assert not AuditEvent.objects.filter(action="session.pinned_by_number").exists()


def test_a_version_the_label_released_and_one_that_passes_are_pinned_and_audited(governed, v1, v2, agent):
    assert pin(agent, 1).status_code == 201  # production targeted it: it passed that label
    ci = make_api(Role.CI, "pipeline")
    check_report(version=v2, name="ci", status="success", actor=ci.actor)
    started = pin(agent, 2)
    assert started.status_code == 201, started.content
    events = AuditEvent.objects.filter(action="session.pinned_by_number").order_by("id")
    assert [(e.actor, e.data["version"], e.data["allowed"]) for e in events] == [
        (agent.actor.name, 1, "passes the labels' policy"),
        (agent.actor.name, 2, "passes the labels' policy"),
    ]
    assert events[1].target == started.json()["id"]


def test_the_strictest_label_counts_approvals_too(bundle, production, v1, v2, ops, agent):
    label_policy_set(bundle=bundle, name="production", changes={"required_approvals": 1}, actor=ops.actor, reason="r")
    refused = pin(agent, 2)
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["labels"][0]["approvals"]["missing"] == 1
    reviewer = make_api(Role.PUBLISHER, "reviewer")
    assert reviewer.post("/api/v1/bundles/refunds/versions/2/approvals/", {"reason": "read it"}).status_code == 201
    assert pin(agent, 2).status_code == 201


def test_a_bundle_without_governed_labels_pins_any_version(bundle, production, v1, v2, agent):
    assert pin(agent, 2).status_code == 201
    assert AuditEvent.objects.get(action="session.pinned_by_number").data["version"] == 2


def test_ops_grant_pin_any_version_to_a_named_key_or_role_and_it_is_audited(governed, v2, agent, publisher, ops):
    harness = make_api(Role.AGENT, "harness")
    assert pin(harness, 2).status_code == 403
    assert agent.get(POLICY).json() == {"bundle": "refunds", "pin_any_version": []}

    grant = {"pin_any_version": ["key:harness", "role:publisher"], "reason": "the eval harness"}
    assert publisher.put(POLICY, grant).status_code == 403  # ops only
    answer = ops.put(POLICY, grant)
    assert answer.status_code == 200, answer.content
    assert answer.json()["pin_any_version"] == ["key:harness", "role:publisher"]
    changed = AuditEvent.objects.get(action="bundle.pin_policy_changed")
    assert (changed.actor, changed.reason, changed.data["before"]) == (ops.actor.name, "the eval harness", [])

    assert pin(harness, 2).status_code == 201
    assert pin(publisher, 2).status_code == 201
    assert pin(agent, 2).status_code == 403  # not named: neither its key nor its role
    assert pin(ops, 2).status_code == 403  # a role grant names that role only, not the ladder above it
    allowed = AuditEvent.objects.filter(action="session.pinned_by_number").order_by("id")
    assert [e.data["allowed"] for e in allowed] == ["granted (key:harness)", "granted (role:publisher)"]


@pytest.mark.parametrize(
    "grants",
    [["role:boss"], ["key:"], ["anyone"], [7], ["key:" + "x" * 201], [f"key:k{i}" for i in range(21)], "key:a"],
)
def test_a_grant_that_names_nothing_is_a_400(governed, ops, grants):
    answer = ops.put(POLICY, {"pin_any_version": grants, "reason": "r"})
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "validation_error"


@pytest.mark.django_db(transaction=True)
def test_the_fast_lane_refuses_the_same_pin(governed, agent):
    from edge.django_lane import shutdown_pool
    from tests.edge.test_fastlane import _same, both

    try:
        body = json.dumps({"bundle": "refunds", "version": 2}).encode()
        fast, slow = both("POST", "/api/v1/sessions/", agent.secret, body, **{"Content-Type": "application/json"})
        _same(fast, slow)
        assert fast[0] == 403 and json.loads(fast[2])["error"]["code"] == "pin_not_allowed"
    finally:
        shutdown_pool()
