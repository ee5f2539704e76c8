"""Guarded rollouts (docs/operations.md#guarded-rollouts), judged in process through the same
service the worker runs (evidence.rollouts.guards_judge): rollback, hold, promote steps,
overrides, and bad guards refused in the contract's shape."""

import pytest

from audit.models import AuditEvent
from evidence import counts
from evidence.models import GuardState, RolloutGuard
from evidence.rollouts import guards_judge
from registry.models import Label
from registry.services import label_move
from tests.evidence.test_evidence_answers import run_sessions

GUARD = "/api/v1/bundles/refunds/labels/production/guard/"
RESOLVED = {"metrics": [{"name": "outcome.resolved", "tolerance": 0.02}], "min_sessions": 30, "action": "rollback"}


@pytest.fixture
def split(bundle, ops, production, v2):
    label_move(
        bundle=bundle, name="production", targets=[(production.version, 50), (v2, 50)], actor=ops.actor, reason="ab"
    )
    counts.flush()


def label() -> Label:
    return Label.objects.get(name="production")


def weights() -> dict[int, int]:
    return {t["number"]: t["weight"] for t in label().targets} or {label().version.number: 100}


def test_a_worse_new_arm_is_rolled_back_with_the_evidence_in_the_label_history(bundle, split, ops, agent):
    from access.actors import SYSTEM
    from webhooks.models import Delivery
    from webhooks.services import endpoint_create

    endpoint_create(url="http://127.0.0.1:9/hook", events=["rollout.guarded"], actor=SYSTEM)
    assert ops.put(GUARD, {**RESOLVED, "reason": "guard the v2 rollout"}).status_code == 200
    run_sessions(bundle, agent, n=40, resolved_share={1: 0.8, 2: 0.5})
    guards_judge()
    assert weights() == {1: 50, 2: 50}  # not enough sessions yet: nothing happens
    run_sessions(bundle, agent, n=400, resolved_share={1: 0.8, 2: 0.5})
    assert guards_judge() == 1
    assert weights() == {1: 100, 2: 0}  # v2 stays a target at weight 0: its sessions keep their pin
    reason = label().history.order_by("-history_id").first().history_change_reason
    assert reason.startswith("guard: outcome.resolved worse by ") and "points" in reason and "n=" in reason
    assert RolloutGuard.objects.get().state == GuardState.ROLLED_BACK
    assert AuditEvent.objects.filter(action="rollout.guarded", reason=reason).exists()
    delivery = Delivery.objects.get(event="rollout.guarded")  # the webhook, with the evidence
    data = delivery.payload.get("data", delivery.payload)
    assert data["action"] == "rollback" and data["reason"] == reason
    assert data["evidence"][0]["metric"] == "outcome.resolved" and data["evidence"][0]["verdict"] == "worse"
    body = ops.get(GUARD).json()
    assert body["state"] == "rolled_back" and body["last_verdict"]["action"] == "rollback"
    assert guards_judge() == 0  # no longer watching: nothing more happens
    ack = ops.post(GUARD + "override/", {"action": "acknowledge", "reason": "known; watching again"})
    assert ack.status_code == 200 and ack.json()["state"] == "watching"


def test_equal_arms_are_left_alone_and_hold_freezes_the_weights(bundle, split, ops, agent):
    ops.put(GUARD, {**RESOLVED, "action": "hold", "reason": "r"})
    run_sessions(bundle, agent, n=300, resolved_share={1: 0.7, 2: 0.7})
    guards_judge()
    assert weights() == {1: 50, 2: 50} and RolloutGuard.objects.get().state == GuardState.WATCHING
    run_sessions(bundle, agent, n=600, resolved_share={1: 0.9, 2: 0.3})
    guards_judge()
    guard = RolloutGuard.objects.get()
    assert guard.state == GuardState.HELD and weights() == {1: 50, 2: 50}
    assert guard.last_verdict["reason"].startswith("guard: outcome.resolved worse by")


def test_a_hold_freezes_a_stepped_rollout_where_it_is_without_a_label_move(bundle, split, ops, agent):
    """`hold` (freeze the weights): the label keeps the weights of the step it was on, the guard
    moves nothing (no history row), and no promote step follows while it is held, however good
    the evidence becomes, until ops acknowledges it; the hold is in the audit log."""
    spec = {**RESOLVED, "min_sessions": 20, "action": "hold", "promote_steps": [10, 50, 100]}
    assert ops.put(GUARD, {**spec, "reason": "ramp v2, hold if worse"}).status_code == 200
    assert weights() == {1: 90, 2: 10}
    moves = label().history.count()
    run_sessions(bundle, agent, n=600, resolved_share={1: 0.9, 2: 0.3})
    assert guards_judge() == 1
    guard = RolloutGuard.objects.get()
    assert (guard.state, guard.step, weights()) == (GuardState.HELD, 0, {1: 90, 2: 10})
    assert label().history.count() == moves  # a hold changes no label
    held = AuditEvent.objects.get(action="rollout.guarded")
    assert held.data["action"] == "hold" and held.reason.startswith("guard: outcome.resolved worse by")
    # Enough sessions for the next step, the candidate now as good: held, so no step is taken.
    run_sessions(bundle, agent, n=400, resolved_share={1: 0.9, 2: 0.9})
    assert guards_judge() == 0 and weights() == {1: 90, 2: 10} and label().history.count() == moves
    assert RolloutGuard.objects.get().step == 0


def test_promote_steps_advance_while_nothing_is_worse_and_each_step_has_its_minimum(bundle, split, ops, agent):
    spec = {**RESOLVED, "min_sessions": 20, "promote_steps": [10, 50, 100]}
    assert ops.put(GUARD, {**spec, "reason": "ramp v2"}).status_code == 200
    assert weights() == {1: 90, 2: 10}  # the first step
    for expected in ({1: 50, 2: 50}, {2: 100}):
        run_sessions(bundle, agent, n=400, resolved_share={1: 0.7, 2: 0.7})
        guards_judge()
        assert weights() == expected
    assert RolloutGuard.objects.get().state == GuardState.PROMOTED
    reasons = [h.history_change_reason for h in label().history.order_by("history_id")]
    assert reasons[-1].startswith("guard: promote to 100 %")


def test_a_paused_guard_is_not_judged(bundle, split, ops, agent):
    ops.put(GUARD, {**RESOLVED, "reason": "r"})
    assert ops.post(GUARD + "override/", {"action": "pause", "reason": "incident"}).json()["state"] == "paused"
    run_sessions(bundle, agent, n=400, resolved_share={1: 0.9, 2: 0.3})
    assert guards_judge() == 0 and weights() == {1: 50, 2: 50}


def test_bad_guards_are_refused_in_the_contracts_shape(bundle, split, ops, agent, publisher):
    assert publisher.put(GUARD, {**RESOLVED, "reason": "r"}).status_code == 403
    assert agent.put(GUARD, {**RESOLVED, "reason": "r"}).status_code == 403
    for bad in (
        {**RESOLVED, "metrics": []},
        {**RESOLVED, "metrics": [{"name": "vibes", "tolerance": 1}]},
        {**RESOLVED, "metrics": [{"name": "outcome.resolved", "tolerance": -1}]},
        {**RESOLVED, "action": "explode"},
        {**RESOLVED, "promote_steps": [5, 1, 100]},
        {**RESOLVED, "promote_steps": [5, 50]},
        {**RESOLVED, "min_sessions": 1},
        {**RESOLVED, "colour": "red"},
        {**RESOLVED, "reason": ""},
    ):
        response = ops.put(GUARD, {"reason": "r", **bad})
        assert response.status_code == 400, (bad, response.content)
        assert response.json()["error"]["code"] == "validation_error"
    label_move(bundle=bundle, name="staging", version=label().version, actor=ops.actor, reason="s")
    unsplit = ops.put("/api/v1/bundles/refunds/labels/staging/guard/", {**RESOLVED, "reason": "r"})
    assert unsplit.status_code == 409
    assert ops.get("/api/v1/bundles/refunds/labels/staging/guard/").status_code == 404
    assert not RolloutGuard.objects.exists()


LABEL = "/api/v1/bundles/refunds/labels/production/"


def test_a_put_of_a_split_with_its_guard_is_one_change_and_a_refused_guard_moves_nothing(
    bundle, production, v2, ops, publisher
):
    targets = [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}]
    refused = publisher.put(LABEL, {"targets": targets, "guard": RESOLVED, "reason": "r"})
    assert refused.status_code == 403 and weights() == {1: 100}
    bad = ops.put(LABEL, {"targets": targets, "guard": {**RESOLVED, "action": "pray"}, "reason": "r"})
    assert bad.status_code == 400 and "guard.action" in bad.json()["error"]["details"] and weights() == {1: 100}
    moved = ops.put(LABEL, {"targets": targets, "guard": RESOLVED, "reason": "ship v2 guarded"})
    assert moved.status_code == 200, moved.content
    assert weights() == {1: 90, 2: 10} and RolloutGuard.objects.get().candidate.number == 2
    # PATCH on the split: a new guard, then null removes it; the targets stay
    patched = ops.patch(LABEL, {"guard": {**RESOLVED, "action": "hold"}, "reason": "hold instead"})
    assert patched.status_code == 200, patched.content
    assert RolloutGuard.objects.get().spec["action"] == "hold"
    assert ops.patch(LABEL, {"guard": None, "reason": "done"}).status_code == 200
    assert not RolloutGuard.objects.exists() and weights() == {1: 90, 2: 10}
