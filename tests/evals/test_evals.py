"""Evaluation suites and runs: suites are immutable and content-addressed; a run's replies are
scored by the registry, stored, and reported as the `eval:<suite>` check on the version's content
hash with an in-toto statement anyone can recompute; a newer suite makes old checks stale."""

import hashlib
import json

import pytest
from django.db import IntegrityError, connection, transaction

from access.models import Role
from evals.models import SuiteVersion
from registry.services import label_move, label_policy_set, version_publish
from tests.conftest import content, make_api

pytestmark = pytest.mark.django_db

BUNDLE = "/api/v1/bundles/refunds"
ITEMS = [
    {
        "id": "refund-asks-order",
        "input": {"messages": [{"role": "user", "content": "I want a refund"}]},
        "expect": [{"type": "contains", "value": "order number"}],
        "tags": ["refunds"],
    },
    {
        "id": "refund-calls-tool",
        "input": {"messages": [{"role": "user", "content": "Refund order 1042"}]},
        "expect": [{"type": "tool_call", "name": "process_refund", "arguments": {"order_id": "1042"}}],
    },
]


@pytest.fixture
def ci(db):
    return make_api(Role.CI, "ci-pipeline")


def publish_suite(api, items=ITEMS, name="refund-evals", message="first"):
    if api.get(f"/api/v1/suites/{name}/").status_code == 404:
        assert api.post("/api/v1/suites/", {"name": name}).status_code == 201
    return api.post(f"/api/v1/suites/{name}/versions/", {"content": {"items": items}, "message": message})


def good_replies(runs=1):
    return [
        *[
            {"item": "refund-asks-order", "run": r, "reply": {"text": "What is your Order Number?"}}
            for r in range(1, runs + 1)
        ],
        *[
            {
                "item": "refund-calls-tool",
                "run": r,
                "reply": {
                    "text": "",
                    "tool_calls": [{"name": "process_refund", "arguments": {"order_id": "1042", "amount": 5}}],
                },
            }
            for r in range(1, runs + 1)
        ],
    ]


def record(api, number, results, threshold=0.8, runs=1, suite_version=1):
    return api.post(
        f"{BUNDLE}/versions/{number}/evals/",
        {
            "suite": "refund-evals",
            "suite_version": suite_version,
            "provider": "anthropic",
            "model": "m-1",
            "runs": runs,
            "threshold": threshold,
            "results": results,
        },
    )


def test_a_suite_version_is_content_addressed_and_line_endings_do_not_make_a_new_one(publisher):
    first = publish_suite(publisher)
    assert first.status_code == 201, first.content
    crlf = json.loads(json.dumps(ITEMS).replace("I want a refund", "I want\\r\\na refund"))
    lf = json.loads(json.dumps(ITEMS).replace("I want a refund", "I want\\na refund"))
    second = publish_suite(publisher, crlf, message="two lines")
    assert second.status_code == 201 and second.json()["number"] == 2
    again = publish_suite(publisher, lf, message="the same, typed on another machine")
    assert again.status_code == 200 and again.json()["number"] == 2
    stored = SuiteVersion.objects.get(number=2)
    assert stored.content_hash == hashlib.sha256(bytes(stored.canonical)).hexdigest()
    assert b"\\r" not in bytes(stored.canonical)


def test_a_published_suite_version_cannot_change_or_go_in_the_database(publisher):
    publish_suite(publisher)
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE evals_suiteversion SET canonical = %s", [b'{"items":[]}'])
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM evals_suiteversion")


def test_an_invalid_suite_lists_every_problem_and_a_hostile_regex_is_refused(publisher):
    items = [
        {"input": {"messages": []}, "expect": [{"type": "regex", "pattern": "(a+)+" * 400}]},
        {"input": {"messages": [{"role": "user", "content": "x"}]}, "expect": [{"type": "nope"}]},
        {"input": {"messages": [{"role": "user", "content": "x"}]}, "expect": [{"type": "regex", "pattern": "(?=x)"}]},
    ]
    answer = publish_suite(publisher, items)
    assert answer.status_code == 400, answer.content
    details = answer.json()["error"]["details"]
    assert set(details) == {"items[0].input.messages", "items[0].expect[0]", "items[1].expect[0]", "items[2].expect[0]"}
    assert "lookahead" in details["items[2].expect[0]"][0]
    assert SuiteVersion.objects.count() == 0


def test_an_agent_key_cannot_publish_a_suite(agent):
    assert agent.post("/api/v1/suites/", {"name": "x"}).status_code == 403


def test_the_plan_names_every_item_a_version_cannot_take(publisher, ops, bundle):
    declared = content(
        "Help {{customer}}.", variables={"customer": {"type": "string", "required": True, "scope": "session"}}
    )
    version_publish(bundle=bundle, content=declared, message="v1", actor=ops.actor)
    items = [
        {**ITEMS[0], "input": {**ITEMS[0]["input"], "variables": {"customer": "Ann", "tier": "gold"}}},
        ITEMS[1],
    ]
    publish_suite(publisher, items)
    plan = publisher.post(f"{BUNDLE}/versions/1/evals/plan/", {"suite": "refund-evals"}).json()
    assert plan["problems"] == [
        "item refund-asks-order: variables.tier: Not declared by the pinned version.",
        "item refund-calls-tool: variables.customer: This variable is required.",
    ]


def test_a_run_over_two_versions_reports_checks_with_attestations_that_recompute(publisher, ci, agent, v1, v2):
    publish_suite(publisher)
    good = record(ci, 1, good_replies(runs=2), runs=2)
    assert good.status_code == 201, good.content
    run = good.json()
    assert (run["passed"], run["total"], run["status"]) == (4, 4, "success")

    worse = good_replies(runs=2)
    worse[2]["reply"]["tool_calls"][0]["arguments"]["order_id"] = "9999"  # wrong order, run 1
    worse[3]["reply"] = {"error": "provider timed out"}  # an error is never a pass
    bad = record(ci, 2, worse, runs=2)
    assert bad.status_code == 201, bad.content
    assert (bad.json()["passed"], bad.json()["errors"], bad.json()["status"]) == (2, 1, "failure")

    # The check on each content hash, with the run and the statement's digest.
    for number, status, body in ((1, "success", run), (2, "failure", bad.json())):
        checks = {c["name"]: c for c in agent.get(f"{BUNDLE}/versions/{number}/checks/").json()["results"]}
        check = checks["eval:refund-evals"]
        assert check["status"] == status and check["evidence"]["run"] == body["id"] and not check["stale"]

    # The attestation: recompute every digest from the bytes.
    statement = ci.get(f"/api/v1/evals/{run['id']}/").json()["attestation"]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"][0]["digest"]["sha256"] == hashlib.sha256(bytes(v1.canonical)).hexdigest()
    suite_bytes = bytes(SuiteVersion.objects.get(number=1).canonical)
    predicate = statement["predicate"]
    assert predicate["suite"]["digest"]["sha256"] == hashlib.sha256(suite_bytes).hexdigest()
    expectations = [[i["id"], i["expect"]] for i in json.loads(suite_bytes)["items"]]
    scorers = json.dumps(expectations, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert predicate["scorers"]["digest"]["sha256"] == hashlib.sha256(scorers).hexdigest()
    assert (predicate["model"], predicate["runs"], predicate["threshold"], predicate["pass_rate"]) == (
        "m-1",
        2,
        0.8,
        1.0,
    )
    check = next(
        c for c in agent.get(f"{BUNDLE}/versions/1/checks/").json()["results"] if c["name"].startswith("eval:")
    )
    canonical_statement = json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert check["evidence"]["attestation_sha256"] == hashlib.sha256(canonical_statement).hexdigest()

    # Side by side: the item that broke comes first.
    compared = ci.get(f"/api/v1/evals/compare/?a={run['id']}&b={bad.json()['id']}").json()
    assert compared["items"][0]["item"] == "refund-calls-tool" and compared["items"][0]["flip"] == "broken"
    assert compared["items"][1]["flip"] is None


def test_the_registry_scores_the_replies_not_the_runner(publisher, ci, v1):
    publish_suite(publisher)
    claimed = good_replies()
    claimed[0]["reply"] = {"text": "Sure, refunded.", "passed": True}
    answer = record(ci, 1, claimed)
    assert answer.status_code == 400  # unknown fields are not taken as a verdict either
    claimed[0]["reply"] = {"text": "Sure, refunded."}
    body = record(ci, 1, claimed).json()
    assert body["passed"] == 1 and body["results"][0]["scores"][0]["passed"] is False


def test_missing_or_duplicate_results_are_refused_and_nothing_is_written(publisher, ci, agent, v1):
    publish_suite(publisher)
    answer = record(ci, 1, good_replies()[:1] * 2)
    assert answer.status_code == 400
    assert set(answer.json()["error"]["details"]) == {"results[1].run", "results"}
    assert agent.get(f"{BUNDLE}/versions/1/checks/").json()["results"] == []


def test_only_an_eval_run_reports_an_eval_check_and_only_ci_or_ops_record_runs(publisher, ci, agent, v1):
    publish_suite(publisher)
    forged = ci.post(f"{BUNDLE}/versions/1/checks/", {"name": "eval:refund-evals", "status": "success"})
    assert forged.status_code == 400
    assert record(agent, 1, good_replies()).status_code == 403
    assert record(publisher, 1, good_replies()).status_code == 403


def test_a_newer_suite_makes_the_check_stale_and_a_gated_label_refuses_it(publisher, ci, ops, agent, bundle, v1, v2):
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first")
    label_policy_set(
        bundle=bundle,
        name="production",
        changes={"required_checks": ["eval:refund-evals"]},
        actor=ops.actor,
        reason="gate",
    )
    publish_suite(publisher)
    assert record(ci, 2, good_replies()).status_code == 201
    changed = publish_suite(publisher, [*ITEMS, {**ITEMS[0], "id": "new-case"}], message="one more case")
    assert changed.json()["stale_checks"] == 1
    check = agent.get(f"{BUNDLE}/versions/2/checks/").json()["results"][0]
    assert (check["status"], check["stale"]) == ("pending", True)
    move = ops.put(f"{BUNDLE}/labels/production/", {"version": 2, "reason": "ship"})
    assert move.status_code == 409, move.content
    # A run on the new suite version passes the gate again.
    again = [*good_replies(), {"item": "new-case", "run": 1, "reply": {"text": "Your order number?"}}]
    assert record(ci, 2, again, suite_version=2).status_code == 201
    assert ops.put(f"{BUNDLE}/labels/production/", {"version": 2, "reason": "ship"}).status_code == 200


def test_a_judge_is_pinned_by_hash_and_its_score_decides(publisher, ops, ci, bundle, v1):
    judge_bundle = make_api(Role.OPS)
    judge_bundle.post("/api/v1/bundles/", {"name": "tone-judge"})
    judge = judge_bundle.post(
        "/api/v1/bundles/tone-judge/versions/", {"content": content("Score the tone 0..1."), "message": "judge"}
    ).json()
    wrong = publish_suite(
        publisher, [{**ITEMS[0], "expect": [{"type": "judge", "bundle": "tone-judge", "content_hash": "0" * 64}]}]
    )
    assert wrong.status_code == 400 and "judge" in wrong.json()["error"]["details"]
    pinned = [
        {
            **ITEMS[0],
            "expect": [
                {"type": "judge", "bundle": "tone-judge", "content_hash": judge["content_hash"], "min_score": 0.7}
            ],
        }
    ]
    assert publish_suite(publisher, pinned).status_code == 201
    low = [
        {
            "item": "refund-asks-order",
            "run": 1,
            "reply": {"text": "ok", "judges": {"0": {"score": 0.4, "reason": "curt"}}},
        }
    ]
    body = record(ci, 1, low).json()
    assert body["status"] == "failure" and body["results"][0]["scores"][0]["detail"] == "curt"
    judges = body["attestation"]["predicate"]["judges"]
    assert judges == [{"bundle": "tone-judge", "digest": {"sha256": judge["content_hash"]}}]
