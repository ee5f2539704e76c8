"""Required approvals (four eyes): an approval is recorded per (content hash, approver) by
someone other than the version's author, and a label with `required_approvals: N` applies a
move, a split or a release to content with N distinct approvals at once; without them the
service refuses it (409 approvals_required) and the API turns it into a change request (202,
tests/registry/test_changes.py). Through the API with real
keys, against PostgreSQL (the race between a withdrawal and a move included)."""

import threading

import pytest
from django.db import connection, connections, transaction

from access.models import Role
from audit.models import AuditEvent
from core.errors import ApprovalsRequired
from registry.services import approval_withdraw, label_move, label_policy_set
from tests.conftest import make_api
from webhooks.models import Delivery, Endpoint

pytestmark = pytest.mark.django_db

BUNDLE = "/api/v1/bundles/refunds"
MOVE = {"version": 2, "reason": "ship v2"}


def require(bundle, ops, n=2, label="production"):
    label_policy_set(bundle=bundle, name=label, changes={"required_approvals": n}, actor=ops.actor, reason="4 eyes")


def approve(api, number=2, reason="read the diff"):
    return api.post(f"{BUNDLE}/versions/{number}/approvals/", {"reason": reason})


@pytest.fixture
def reviewers(db):
    return make_api(Role.PUBLISHER, "reviewer-a"), make_api(Role.OPS, "reviewer-b")


def test_the_author_cannot_approve_their_own_version(ops, v2):
    # ops published v2 (tests.conftest): four eyes.
    answer = approve(ops)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "permission_denied"
    assert "four eyes" in answer.json()["error"]["message"]
    assert ops.get(f"{BUNDLE}/versions/2/approvals/").json()["results"] == []


def test_a_move_waits_for_n_distinct_approvals_of_those_bytes(ops, bundle, production, v2, reviewers):
    a, b = reviewers
    require(bundle, ops)
    with pytest.raises(ApprovalsRequired) as refused:
        label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship")
    details = refused.value.details
    assert (details["required"], details["approvals"], details["missing"]) == (2, 0, 2)
    assert ops.put(f"{BUNDLE}/labels/production/", MOVE).status_code == 202  # a change request instead

    assert approve(a).status_code == 201
    again = approve(a, reason="twice")  # the same person counts once
    assert again.status_code == 200
    assert again.json()["reason"] == "read the diff"
    with pytest.raises(ApprovalsRequired) as refused:
        label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship")
    details = refused.value.details
    assert (details["approvals"], details["missing"]) == (1, 1)
    assert details["approvers"] == [a.actor.name]

    assert approve(b).status_code == 201
    moved = ops.put(f"{BUNDLE}/labels/production/", MOVE)
    assert moved.status_code == 200, moved.content
    listed = ops.get(f"{BUNDLE}/versions/2/approvals/").json()
    assert listed["author"] == ops.actor.name
    assert [x["approver"] for x in listed["results"]] == [a.actor.name, b.actor.name]
    assert {x["content_hash"] for x in listed["results"]} == {v2.content_hash}


def test_an_approval_of_other_bytes_does_not_count(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    approve(reviewers[0], number=1)  # v1's content, not v2's
    assert ops.put(f"{BUNDLE}/labels/production/", MOVE).status_code == 202  # not applied: a change request


def test_who_may_approve(agent, v2):
    ci = make_api(Role.CI, "ci-pipeline")
    assert approve(ci).status_code == 403
    assert approve(agent).status_code == 403
    assert approve(make_api(Role.ADMIN, "admin-1")).status_code == 201


def test_a_rollback_to_a_former_target_needs_no_approval(ops, bundle, production, v2):
    assert ops.put(f"{BUNDLE}/labels/production/", MOVE).status_code == 200
    require(bundle, ops)  # v1 was never approved, but production targeted it before
    back = ops.post(f"{BUNDLE}/labels/production/rollback/", {"reason": "v2 misbehaves"})
    assert back.status_code == 200, back.content
    assert back.json()["version"] == 1


def test_a_split_and_a_release_are_gated_too(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    split = {"targets": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}], "reason": "ramp"}
    assert ops.put(f"{BUNDLE}/labels/production/", split).status_code == 202
    release = {"moves": [{"bundle": "refunds", "label": "production", "version": 2}], "reason": "ship"}
    preview = ops.post("/api/v1/releases/", {**release, "dry_run": True}).json()["moves"][0]
    assert preview["allowed"] is False
    assert preview["approvals"] == [
        {"version": 2, "required": 1, "approvers": [], "missing": 1, "rollback": False, "passes": False}
    ]
    assert "approvals" in preview["refusal"]
    assert ops.post("/api/v1/releases/", release).status_code == 202
    approve(reviewers[0])
    assert ops.post("/api/v1/releases/", {**release, "dry_run": True}).json()["moves"][0]["allowed"] is True
    assert ops.post("/api/v1/releases/", release).status_code == 201


def test_an_approval_is_audited_and_announced(v2, reviewers):
    endpoint = Endpoint.objects.create(url="https://hooks.example/x", events=["approval.recorded"], created_by="t")
    approve(reviewers[0])
    approve(reviewers[0])  # not a second approval: no second event
    deliveries = list(Delivery.objects.filter(endpoint=endpoint))
    assert len(deliveries) == 1
    data = deliveries[0].payload["data"]
    assert (data["by"], data["version"], data["content_hash"]) == (reviewers[0].actor.name, 2, v2.content_hash)
    audited = AuditEvent.objects.filter(action="approval.recorded")
    assert [(e.actor, e.reason) for e in audited] == [(reviewers[0].actor.name, "read the diff")]


def test_a_withdrawn_approval_no_longer_counts(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    approve(reviewers[0])
    gone = reviewers[0].client.delete(
        f"{BUNDLE}/versions/2/approvals/", data='{"reason": "found a bug"}', content_type="application/json"
    )
    assert gone.status_code == 204, gone.content
    assert ops.put(f"{BUNDLE}/labels/production/", MOVE).status_code == 202
    assert AuditEvent.objects.filter(action="approval.withdrawn").count() == 1


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "x" * 10_001}, {"reason": 7}, {"reason": "r", "x": 1}])
def test_invalid_approvals_are_400_in_the_contract_shape(v2, reviewers, body):
    answer = reviewers[0].post(f"{BUNDLE}/versions/2/approvals/", body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "validation_error"


def test_labels_without_required_approvals_move_as_before(ops, bundle, production, v2):
    assert ops.put(f"{BUNDLE}/labels/production/", MOVE).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_move_racing_a_withdrawal_never_passes_with_one_approval_missing(ops, bundle, production, v2, reviewers):
    """The withdrawal holds the version row (uncommitted) while the move waits for it; the move
    then counts what is committed and is refused. A move that counted before locking would see
    the approval still there and pass with N-1."""
    require(bundle, ops, n=1)
    assert approve(reviewers[0]).status_code == 201
    withdrawn, release, outcome = threading.Event(), threading.Event(), {}

    def withdraw() -> None:
        try:
            with transaction.atomic():
                approval_withdraw(version=v2, actor=reviewers[0].actor, reason="found a bug")
                withdrawn.set()
                release.wait(timeout=60)
        finally:
            connections.close_all()

    def move() -> None:
        try:
            label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship")
            outcome["result"] = "moved"
        except ApprovalsRequired:
            outcome["result"] = "refused"
        finally:
            connections.close_all()

    first = threading.Thread(target=withdraw)
    first.start()
    assert withdrawn.wait(timeout=60)
    second = threading.Thread(target=move)
    second.start()
    try:
        _wait_for_a_lock_wait()
    finally:
        release.set()
        first.join(timeout=60)
        second.join(timeout=60)
    assert outcome["result"] == "refused"


def _wait_for_a_lock_wait() -> None:
    """Until a backend of this database waits for a row lock (the move, behind the withdrawal)."""
    for _ in range(6000):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        threading.Event().wait(0.01)
    raise AssertionError("the move never waited for the withdrawal's lock")
