"""Change requests (four eyes on a label, issue 27): a move, a split or a release touching a
label with `required_approvals: N` whose target lacks N version approvals answers 202 with a
pending change; N other identities with the label's role approve it and it applies as the
request would have, every check run again; a label that moved meanwhile fails it (409
change_stale). Through the API with real keys, against PostgreSQL, the race between the N-th
approval and a direct move of the label included."""

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from audit.models import AuditEvent
from core.errors import ChangeStale, PreconditionFailed
from registry import changes
from registry.models import Change, ChangeState, Label
from registry.services import (
    approval_record,
    bundle_create,
    check_report,
    label_move,
    label_policy_set,
    version_publish,
)
from tests.conftest import Api, content, make_api
from webhooks.models import Delivery, Endpoint

pytestmark = pytest.mark.django_db

BUNDLE = "/api/v1/bundles/refunds"
MOVE = {"version": 2, "reason": "ship v2"}


def require(bundle, ops, n=2, label="production", **more):
    changes_ = {"required_approvals": n, **more}
    label_policy_set(bundle=bundle, name=label, changes=changes_, actor=ops.actor, reason="4 eyes")


@pytest.fixture
def reviewers(db):
    return make_api(Role.OPS, "reviewer-a"), make_api(Role.OPS, "reviewer-b")


def request_move(ops, body=MOVE):
    answer = ops.put(f"{BUNDLE}/labels/production/", body)
    assert answer.status_code == 202, answer.content
    return answer.json()["change"]


def decide(api, change, verb="approve", reason="read the diff"):
    return api.post(f"/api/v1/changes/{change['id']}/{verb}/", {"reason": reason})


def target(bundle, name="production"):
    return Label.objects.get(bundle=bundle, name=name).version.number


def test_a_move_on_a_label_requiring_approvals_answers_202_and_moves_nothing(ops, bundle, production, v2):
    require(bundle, ops)
    change = request_move(ops)
    assert change["state"] == "pending"
    assert (change["kind"], change["required_approvals"], change["requester"]) == ("move", 2, ops.actor.name)
    assert change["request"]["targets"] == [{"version": 2, "weight": 100}]
    assert change["revisions"] == [{"bundle": "refunds", "label": "production", "revision": 2}]
    assert change["approver_role"] == "ops"  # production is protected
    assert target(bundle) == 1
    assert AuditEvent.objects.filter(action="change.requested").count() == 1


def test_the_requester_cannot_approve_their_own_change(ops, bundle, production, v2):
    require(bundle, ops)
    change = request_move(ops)
    answer = decide(ops, change)
    assert answer.status_code == 403
    assert "four eyes" in answer.json()["error"]["message"]


def test_approving_needs_the_role_the_label_needs(ops, bundle, production, v2):
    require(bundle, ops)
    change = request_move(ops)
    assert decide(make_api(Role.PUBLISHER, "pub"), change).status_code == 403  # protected: ops
    assert decide(make_api(Role.CI, "ci"), change).status_code == 403
    assert decide(make_api(Role.AGENT, "ag"), change).status_code == 403


def test_a_publisher_may_approve_a_change_of_an_unprotected_label(ops, bundle, production, v2):
    label_move(bundle=bundle, name="staging", version=v2, actor=ops.actor, reason="stage")
    require(bundle, ops, n=1, label="staging")
    v3 = version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor).version
    answer = ops.put(f"{BUNDLE}/labels/staging/", {"version": 3, "reason": "stage v3"})
    assert answer.status_code == 202, answer.content
    assert answer.json()["change"]["approver_role"] == "publisher"
    applied = decide(make_api(Role.PUBLISHER, "pub"), answer.json()["change"])
    assert applied.status_code == 200, applied.content
    assert applied.json()["state"] == "applied"
    assert target(bundle, "staging") == v3.number


def test_n_approvals_apply_the_change_with_requester_and_approvers_recorded(
    ops, bundle, production, v2, reviewers, django_capture_on_commit_callbacks
):
    hooks = Endpoint.objects.create(
        url="https://hooks.example/x", events=["change.requested", "change.approved", "label.moved"], created_by="t"
    )
    require(bundle, ops)
    change = request_move(ops)
    a, b = reviewers
    first = decide(a, change)
    assert first.status_code == 200, first.content
    assert first.json()["state"] == "pending"
    assert [x["approver"] for x in first.json()["approvals"]] == [a.actor.name]
    assert decide(a, change, reason="again").json()["approvals"][0]["reason"] == "read the diff"  # counts once
    assert target(bundle) == 1

    with django_capture_on_commit_callbacks(execute=True):
        second = decide(b, change)
    assert second.status_code == 200, second.content
    assert (second.json()["state"], second.json()["decided_by"]) == ("applied", b.actor.name)
    assert second.json()["outcome"]["label"]["version"] == 2
    assert target(bundle) == 2

    latest = Label.objects.get(bundle=bundle, name="production").history.first()
    # The history row: the requester's move, with its reason, and who approved it.
    assert (latest.updated_by, latest.history_change_reason) == (ops.actor.name, "ship v2")
    assert f"change request approved by {a.actor.name}, {b.actor.name}" in latest.move_note
    moved = AuditEvent.objects.get(action="label.moved", data__to_version=2)
    assert moved.data["approvers"] == [a.actor.name, b.actor.name]
    assert AuditEvent.objects.filter(action="change.applied").count() == 1

    sent = {d.payload["type"]: d.payload["data"] for d in Delivery.objects.filter(endpoint=hooks)}
    assert set(sent) == {"change.requested", "change.approved", "label.moved"}
    assert sent["change.approved"]["approvers"] == [a.actor.name, b.actor.name]
    assert sent["change.approved"]["requester"] == ops.actor.name
    assert sent["label.moved"]["to_version"] == 2
    # Decided: a later approval is refused.
    late = decide(make_api(Role.OPS, "reviewer-c"), change)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "change_not_pending")


def test_a_required_check_failing_at_apply_time_fails_the_change(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1, required_checks=["evals"])
    ci = make_api(Role.CI, "ci")
    check_report(version=v2, name="evals", status="success", actor=ci.actor)
    change = request_move(ops)
    check_report(version=v2, name="evals", status="failure", actor=ci.actor)  # a re-run fails
    refused = decide(reviewers[0], change)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "checks_required")
    failed = Change.objects.get(pk=change["id"])
    assert (failed.state, failed.outcome["code"]) == (ChangeState.FAILED, "checks_required")
    assert target(bundle) == 1
    assert not AuditEvent.objects.filter(action="label.moved", data__to_version=2).exists()


def test_a_change_is_requested_only_when_approvals_alone_refuse_the_move(ops, bundle, production, v2):
    require(bundle, ops, n=1, required_checks=["evals"])
    refused = ops.put(f"{BUNDLE}/labels/production/", MOVE)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "checks_required")
    assert not Change.objects.exists()


def test_a_label_moved_meanwhile_fails_the_approval_with_change_stale(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    change = request_move(ops)
    v3 = version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor).version
    approval_record(version=v3, actor=reviewers[1].actor, reason="fine")
    label_move(bundle=bundle, name="production", version=v3, actor=ops.actor, reason="hotfix")
    stale = decide(reviewers[0], change)
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "change_stale")
    assert stale.json()["error"]["details"]["labels"][0]["requested_revision"] == 2
    assert Change.objects.get(pk=change["id"]).state == ChangeState.FAILED
    assert target(bundle) == 3


def test_a_rejected_change_cannot_be_approved(ops, bundle, production, v2, reviewers):
    hooks = Endpoint.objects.create(url="https://hooks.example/x", events=["change.rejected"], created_by="t")
    require(bundle, ops, n=1)
    change = request_move(ops)
    rejected = decide(reviewers[0], change, "reject", "not now")
    assert rejected.status_code == 200, rejected.content
    assert rejected.json()["state"] == "rejected"
    late = decide(reviewers[1], change)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "change_not_pending")
    assert target(bundle) == 1
    assert [d.payload["data"]["by"] for d in Delivery.objects.filter(endpoint=hooks)] == [reviewers[0].actor.name]


def test_the_requester_may_withdraw_their_change(ops, bundle, production, v2):
    require(bundle, ops, n=1)
    change = request_move(ops)
    assert decide(ops, change, "reject", "withdrawn").json()["state"] == "rejected"


def test_an_expired_change_is_409_and_the_sweep_marks_it(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    first, second = request_move(ops), request_move(ops)
    Change.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert ops.get(f"/api/v1/changes/{first['id']}/").json()["state"] == "expired"  # before the sweep
    late = decide(reviewers[0], first)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "change_not_pending")
    assert late.json()["error"]["details"]["state"] == "expired"
    assert changes.change_expire_sweep() == 1  # the second; the first was marked by the approve
    assert Change.objects.get(pk=second["id"]).state == ChangeState.EXPIRED
    assert target(bundle) == 1


def test_changes_expire_after_change_ttl_hours(ops, bundle, production, v2, settings):
    settings.CHANGE_TTL_HOURS = 2
    require(bundle, ops, n=1)
    change = Change.objects.get(pk=request_move(ops)["id"])
    assert timedelta(hours=2) - (change.expires_at - change.created_at) < timedelta(seconds=5)


def test_pending_changes_are_listed_within_the_key_scope(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    change = request_move(ops)
    listed = ops.get("/api/v1/changes/?state=pending").json()
    assert [c["id"] for c in listed["results"]] == [change["id"]]
    assert ops.get("/api/v1/changes/?state=applied").json()["results"] == []
    key, secret = api_key_create(name="other", role=Role.OPS, actor=SYSTEM, scopes=["other-*"])
    other = Api(secret, key.as_actor())
    assert other.get("/api/v1/changes/?state=pending").json()["results"] == []
    key, secret = api_key_create(name="refunds-only", role=Role.AGENT, actor=SYSTEM, scopes=["refund*"])
    scoped = Api(secret, key.as_actor())
    assert [c["id"] for c in scoped.get("/api/v1/changes/").json()["results"]] == [change["id"]]
    assert other.get(f"/api/v1/changes/{change['id']}/").status_code == 404
    assert decide(other, change).status_code == 404
    assert ops.get("/api/v1/changes/?state=nonsense").status_code == 400


def test_a_release_touching_such_a_label_becomes_a_change(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    release = {"moves": [{"bundle": "refunds", "label": "production", "version": 2}], "reason": "ship"}
    answer = ops.post("/api/v1/releases/", release)
    assert answer.status_code == 202, answer.content
    change = answer.json()["change"]
    assert (change["kind"], change["state"]) == ("release", "pending")
    assert target(bundle) == 1
    applied = decide(reviewers[0], change)
    assert applied.status_code == 200, applied.content
    assert applied.json()["state"] == "applied"
    assert ops.get(f"/api/v1/releases/{applied.json()['outcome']['release']}/").status_code == 200
    assert target(bundle) == 2


def test_a_split_becomes_a_change_too(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    split = {"targets": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}], "reason": "ramp"}
    change = request_move(ops, split)
    assert decide(reviewers[0], change).json()["state"] == "applied"
    assert [t["weight"] for t in ops.get(f"{BUNDLE}/labels/production/").json()["targets"]] == [90, 10]


def test_a_target_with_n_version_approvals_applies_at_once(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    approval_record(version=v2, actor=reviewers[0].actor, reason="read it")
    moved = ops.put(f"{BUNDLE}/labels/production/", MOVE)
    assert moved.status_code == 200, moved.content
    assert not Change.objects.exists()


# --- the race between the N-th approval and a direct move of the label ---------------------------


@pytest.mark.django_db(transaction=True)
def test_the_last_approval_and_a_direct_move_never_both_apply(ops, reviewers):
    """Round after round, the approval that applies a change and a direct move of the same label
    (If-Match on the revision both started from, as a careful client sends it) run at once.
    Both take the label row first, so one waits for the other's commit and then sees the new
    revision: either the change applied (label on its target) and the move got 412, or the
    move won (label on its target) and the change failed stale. Never both, never neither."""
    outcomes = []
    for round_ in range(12):
        bundle = bundle_create(name=f"race-{round_}", actor=ops.actor)
        versions = [
            version_publish(bundle=bundle, content=content(f"r{round_} v{i}"), message="v", actor=ops.actor).version
            for i in (1, 2, 3)
        ]
        label, _ = label_move(bundle=bundle, name="production", version=versions[0], actor=ops.actor, reason="r")
        label = label_policy_set(
            bundle=bundle, name="production", changes={"required_approvals": 1}, actor=ops.actor, reason="4 eyes"
        )
        approval_record(version=versions[2], actor=reviewers[1].actor, reason="hotfix reviewed")
        outcome = changes.label_move_or_request(
            bundle=bundle, name="production", version=versions[1], actor=ops.actor, reason="ship v2"
        )
        change = outcome.change
        assert change is not None
        revision = label.revision
        start, result = threading.Barrier(2), {}

        def approve(change=change, start=start, result=result) -> None:
            try:
                start.wait(timeout=30)
                changes.change_approve(change=change, actor=reviewers[0].actor, reason="ok")
                result["approve"] = "applied"
            except ChangeStale:
                result["approve"] = "stale"
            finally:
                connections.close_all()

        def move(bundle=bundle, v3=versions[2], start=start, result=result, revision=revision) -> None:
            try:
                start.wait(timeout=30)
                label_move(
                    bundle=bundle,
                    name="production",
                    version=v3,
                    actor=ops.actor,
                    reason="hotfix",
                    expected_revision=revision,
                )
                result["move"] = "moved"
            except PreconditionFailed:
                result["move"] = "412"
            finally:
                connections.close_all()

        threads = [threading.Thread(target=approve), threading.Thread(target=move)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        final = Label.objects.get(bundle=bundle, name="production")
        state = Change.objects.get(pk=change.pk).state
        if result == {"approve": "applied", "move": "412"}:
            assert (final.version.number, state) == (2, ChangeState.APPLIED)
        else:
            assert result == {"approve": "stale", "move": "moved"}, result
            assert (final.version.number, state) == (3, ChangeState.FAILED)
        assert final.revision == revision + 1  # exactly one of them moved it
        outcomes.append(result["approve"])
    assert len(outcomes) == 12


def test_the_admin_lists_pending_changes_with_their_impact_and_approves_them(ops, bundle, production, v2):
    from adminui.groups import OPS
    from tests.adminui.test_adminui_views import client_for, make_user

    require(bundle, ops, n=1)
    change = request_move(ops)
    olga = client_for(make_user("olga", OPS))
    page = olga.get("/admin/registry/bundle/changes/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="change-{change["id"]}"' in html and "ship v2" in html and "v2 100%" in html
    assert 'href="/admin/registry/bundle/changes/"' in html  # in the top navigation
    approved = olga.post(f"/admin/registry/bundle/changes/{change['id']}/approve/", {"reason": "looks right"})
    assert approved.status_code == 302
    assert Change.objects.get(pk=change["id"]).state == ChangeState.APPLIED
    assert target(bundle) == 2
    assert f'id="change-{change["id"]}"' not in olga.get("/admin/registry/bundle/changes/").content.decode()


def test_the_admin_rejects_a_change(ops, bundle, production, v2):
    from adminui.groups import OPS
    from tests.adminui.test_adminui_views import client_for, make_user

    require(bundle, ops, n=1)
    change = request_move(ops)
    olga = client_for(make_user("olga", OPS))
    olga.post(f"/admin/registry/bundle/changes/{change['id']}/reject/", {"reason": "not today"})
    assert Change.objects.get(pk=change["id"]).state == ChangeState.REJECTED


def _wait_for_a_lock_wait() -> None:
    """Until a backend of this database waits for a row lock."""
    from django.db import connection

    for _ in range(6000):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        threading.Event().wait(0.01)
    raise AssertionError("nobody waited for the other's lock")


def _hold_then(first, second) -> dict:
    """Run `first` in a transaction held open until `second` (another thread) waits for a lock,
    then commit it; returns what each answered."""
    from django.db import transaction

    held, release, result = threading.Event(), threading.Event(), {}

    def run(name, fn, hold) -> None:
        try:
            if hold:
                with transaction.atomic():
                    result[name] = fn()
                    held.set()
                    release.wait(timeout=60)
            else:  # its own transaction, as a request runs it (a failure it records commits)
                result[name] = fn()
        except Exception as exc:  # noqa: BLE001 - the answer is what the test compares
            result[name] = type(exc).__name__
        finally:
            held.set()
            connections.close_all()

    one = threading.Thread(target=run, args=("first", first, True))
    one.start()
    assert held.wait(timeout=60)
    two = threading.Thread(target=run, args=("second", second, False))
    two.start()
    try:
        _wait_for_a_lock_wait()
    finally:
        release.set()
        one.join(timeout=60)
        two.join(timeout=60)
    return result


@pytest.fixture
def race_setup(ops, bundle, production, v2, reviewers):
    require(bundle, ops, n=1)
    v3 = version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor).version
    approval_record(version=v3, actor=reviewers[1].actor, reason="hotfix reviewed")
    change = changes.label_move_or_request(
        bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2"
    ).change
    return bundle, v2, v3, change


@pytest.mark.django_db(transaction=True)
def test_a_move_that_waited_for_the_last_approval_sees_its_revision(ops, reviewers, race_setup):
    bundle, v2, v3, change = race_setup
    result = _hold_then(
        lambda: changes.change_approve(change=change, actor=reviewers[0].actor, reason="ok").state,
        lambda: label_move(
            bundle=bundle, name="production", version=v3, actor=ops.actor, reason="hotfix", expected_revision=2
        ),
    )
    assert result == {"first": "applied", "second": "PreconditionFailed"}
    assert target(bundle) == 2


@pytest.mark.django_db(transaction=True)
def test_an_approval_that_waited_for_a_move_fails_stale(ops, reviewers, race_setup):
    bundle, v2, v3, change = race_setup
    result = _hold_then(
        lambda: label_move(bundle=bundle, name="production", version=v3, actor=ops.actor, reason="hotfix")[0].revision,
        lambda: changes.change_approve(change=change, actor=reviewers[0].actor, reason="ok"),
    )
    assert result == {"first": 3, "second": "ChangeStale"}
    assert target(bundle) == 3
    assert Change.objects.get(pk=change.pk).state == ChangeState.FAILED


@pytest.mark.django_db(transaction=True)
def test_two_changes_of_one_label_never_both_apply(ops, reviewers, race_setup):
    """A second change request of the same label, bound to the same revision: whichever last
    approval takes the label row second finds the revision moved and fails stale."""
    bundle, v2, v3, first_change = race_setup
    v4 = version_publish(bundle=bundle, content=content("four"), message="v4", actor=ops.actor).version
    second_change = changes.label_move_or_request(
        bundle=bundle, name="production", version=v4, actor=ops.actor, reason="ship v4"
    ).change
    result = _hold_then(
        lambda: changes.change_approve(change=first_change, actor=reviewers[0].actor, reason="ok").state,
        lambda: changes.change_approve(change=second_change, actor=reviewers[1].actor, reason="ok").state,
    )
    assert result == {"first": "applied", "second": "ChangeStale"}
    assert target(bundle) == 2
    states = {c.pk: c.state for c in Change.objects.all()}
    assert (states[first_change.pk], states[second_change.pk]) == (ChangeState.APPLIED, ChangeState.FAILED)


def test_a_move_confirmed_in_the_admin_becomes_a_change_request_too(ops, bundle, production, v2):
    from adminui.groups import OPS
    from tests.adminui.test_adminui_views import client_for, make_user

    require(bundle, ops, n=1)
    olga = client_for(make_user("olga", OPS))
    form = {"label": "production", "version": "2", "reason": "ship", "confirm": "yes", "expected_revision": "2"}
    response = olga.post("/admin/registry/bundle/refunds/move/", form)
    assert response.status_code == 302
    assert response["Location"] == "/admin/registry/bundle/changes/"
    change = Change.objects.get()
    assert (change.requester, change.state) == ("user:olga", ChangeState.PENDING)
    assert target(bundle) == 1
