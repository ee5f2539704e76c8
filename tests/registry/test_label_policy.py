"""Label policies set by ops (PATCH /api/v1/bundles/{name}/labels/{label}/), through the API
with real keys: who may change them, If-Match, the history row, and that every rule reads the
label's policy rather than its name."""

import json

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from audit.models import AuditEvent
from registry.services import label_move
from tests.conftest import Api

pytestmark = pytest.mark.django_db

LABELS = "/api/v1/bundles/refunds/labels"


def patch(api, path, body, **extra):
    return api.client.patch(path, data=json.dumps(body), content_type="application/json", **extra)


def test_ops_unprotects_production_and_a_publisher_may_then_move_it(ops, publisher, production, v2):
    refused = publisher.put(f"{LABELS}/production/", {"version": v2.number, "reason": "ship"})
    assert refused.status_code == 403

    answer = patch(ops, f"{LABELS}/production/", {"protected": False, "reason": "team owns its releases"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["protected"] is False
    assert answer["ETag"] == '"rev-2"'

    moved = publisher.put(f"{LABELS}/production/", {"version": v2.number, "reason": "ship"})
    assert moved.status_code == 200, moved.content


def test_ops_protects_a_label_of_another_name(ops, publisher, bundle, v1, v2):
    label_move(bundle=bundle, name="canary", version=v1, actor=publisher.actor, reason="try")
    assert patch(ops, f"{LABELS}/canary/", {"protected": True, "reason": "customers on it"}).status_code == 200
    refused = publisher.put(f"{LABELS}/canary/", {"version": v2.number, "reason": "ship"})
    assert refused.status_code == 403
    assert "protected" in refused.json()["error"]["message"]


def test_only_ops_may_change_a_policy(publisher, production):
    answer = patch(publisher, f"{LABELS}/production/", {"protected": False, "reason": "mine now"})
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "permission_denied"


def test_a_policy_change_needs_a_reason_and_a_known_field(ops, production):
    no_reason = patch(ops, f"{LABELS}/production/", {"protected": False})
    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()["error"]["details"]
    unknown = patch(ops, f"{LABELS}/production/", {"protectd": False, "reason": "typo"})
    assert unknown.status_code == 400
    assert "protectd" in unknown.json()["error"]["details"]


@pytest.mark.parametrize(
    "body",
    [
        {"required_checks": ["Evals"]},  # upper case
        {"required_checks": ["x" * 65]},
        {"required_checks": [f"c{i}" for i in range(21)]},
        {"required_checks": ["evals", "evals"]},
        {"required_checks": "evals"},
        {"required_approvals": -1},
        {"required_approvals": True},
        {"protected": "yes"},
        {"compatibility": "forward"},
    ],
)
def test_an_invalid_policy_is_a_400_in_the_contract_shape(ops, production, body):
    answer = patch(ops, f"{LABELS}/production/", {**body, "reason": "r"})
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "validation_error"
    assert set(body) <= set(error["details"])


def test_required_approvals_are_a_policy_up_to_the_bound(ops, production):
    answer = patch(ops, f"{LABELS}/production/", {"required_approvals": 2, "reason": "four eyes"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["required_approvals"] == 2
    too_many = patch(ops, f"{LABELS}/production/", {"required_approvals": 11, "reason": "r"})
    assert too_many.status_code == 400
    assert "required_approvals" in too_many.json()["error"]["details"]


def test_if_match_guards_a_policy_change(ops, production):
    stale = patch(ops, f"{LABELS}/production/", {"protected": False, "reason": "r"}, HTTP_IF_MATCH='"rev-7"')
    assert stale.status_code == 412
    assert stale.json()["error"]["details"]["current"]["revision"] == 1
    fresh = patch(ops, f"{LABELS}/production/", {"protected": False, "reason": "r"}, HTTP_IF_MATCH='"rev-1"')
    assert fresh.status_code == 200


def test_the_history_records_who_changed_the_policy_and_why(ops, production):
    patch(ops, f"{LABELS}/production/", {"required_checks": ["evals"], "reason": "evals gate production"})
    rows = ops.get(f"{LABELS}/production/history/").json()["results"]
    latest = rows[0]
    assert latest["kind"] == "policy"
    assert latest["by"] == ops.actor.name
    assert latest["reason"] == "evals gate production"
    assert latest["required_checks"] == ["evals"]
    assert "required_checks" in latest["note"]
    assert rows[1]["kind"] == "move"
    event = AuditEvent.objects.filter(action="label.policy_changed").get()
    assert event.data["to"] == {"required_checks": ["evals"]}


def test_setting_the_same_policy_records_nothing(ops, production):
    answer = patch(ops, f"{LABELS}/production/", {"protected": True, "reason": "again"})
    assert answer.status_code == 200
    assert answer["ETag"] == '"rev-1"'
    assert len(ops.get(f"{LABELS}/production/history/").json()["results"]) == 1


def test_a_scoped_ops_key_cannot_change_another_bundles_label(production):
    key, secret = api_key_create(name="scoped", role=Role.OPS, scopes=["billing-*"], actor=SYSTEM)
    api = Api(secret, key.as_actor())
    assert patch(api, f"{LABELS}/production/", {"protected": False, "reason": "r"}).status_code == 404


def test_production_is_still_created_protected_and_backward(ops, bundle, v1):
    created = ops.put(f"{LABELS}/production/", {"version": v1.number, "reason": "first"}).json()
    assert created["protected"] is True
    assert created["compatibility"] == "backward"
    assert created["required_checks"] == []
    assert created["required_approvals"] == 0


def test_a_move_with_a_reason_longer_than_the_history_column_is_recorded_whole_in_the_audit(ops, bundle, v1):
    """The label history keeps a reason in 100 characters (django-simple-history's column): a
    longer one (reasons may be 10,000) is cut there with an ellipsis, kept whole in the audit log,
    and the move is not a 500."""
    from audit.models import AuditEvent

    reason = "ship it: " + "x" * 300
    answer = ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 1, "reason": reason})
    assert answer.status_code == 201, answer.content
    history = ops.get("/api/v1/bundles/refunds/labels/production/history/").json()["results"]
    assert history[0]["reason"] == reason[:99] + "\u2026"
    assert AuditEvent.objects.filter(reason=reason).exists()
