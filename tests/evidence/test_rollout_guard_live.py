"""The live guarded rollout (issue 39): a 50/50 split whose new arm reports worse outcomes is
rolled back by the real Celery worker and beat on ROLLOUT_GUARD_INTERVAL=1, with the evidence
in the label history. The sessions report through the services in this process, on the test
database the worker reads."""

import time

import pytest

from evidence import counts
from registry.models import Label
from registry.services import label_move
from tests.evidence.test_evidence_answers import run_sessions
from tests.live import celery_workers, purge_queues, worker_command

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def guard_worker(tmp_path):
    """A worker on the lifecycle queue with beat inside it (-B), judging guards every second."""
    purge_queues()
    command = [*worker_command("lifecycle", concurrency=1, name="guard"), "-B", "-s", str(tmp_path / "beat")]
    with celery_workers(command, env={"ROLLOUT_GUARD_INTERVAL": "1"}) as lines:
        yield lines
    purge_queues()


def test_the_worker_rolls_back_a_guarded_5050_rollout_whose_new_arm_is_worse(
    bundle, production, v2, ops, agent, guard_worker
):
    label_move(
        bundle=bundle, name="production", targets=[(production.version, 50), (v2, 50)], actor=ops.actor, reason="ab"
    )
    guard = {"metrics": [{"name": "outcome.resolved", "tolerance": 0.02}], "min_sessions": 50, "action": "rollback"}
    response = ops.put("/api/v1/bundles/refunds/labels/production/guard/", {**guard, "reason": "guard v2"})
    assert response.status_code == 200, response.content
    run_sessions(bundle, agent, n=500, resolved_share={1: 0.8, 2: 0.5})
    counts.flush()
    began = time.monotonic()
    while time.monotonic() - began < 30:
        label = Label.objects.get(name="production")
        if {t["number"]: t["weight"] for t in label.targets} == {1: 100, 2: 0}:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the worker did not roll back within 30 s:\n" + "".join(guard_worker[-30:]))
    last = label.history.order_by("-history_id").first()
    assert last.history_change_reason.startswith("guard: outcome.resolved worse by ")
    assert "n=" in last.history_change_reason
    assert last.updated_by == "rollout-guard"
    body = ops.get("/api/v1/bundles/refunds/labels/production/guard/").json()
    assert body["state"] == "rolled_back"
    assert body["last_verdict"]["metrics"][0]["verdict"] == "worse"
