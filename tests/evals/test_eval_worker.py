"""Evaluation runs made by the worker (POST .../evals/start/): a real Celery worker runs the suite
through pinned sessions, the turn call and the provider's official SDK against the provider
stand-in (devtools/provider_standin.py) named in EVAL_PROVIDERS, and records the run and its
check as `promptreg eval run` does. Everything a run needs is checked before it is queued; the
day's budget is held; a provider that cannot be reached marks replies `error`."""

import json
import time

import pytest

from access.models import Role
from api import eval_worker
from devtools.provider_standin import Call, Reply, StandIn
from evals import endpoints, jobs
from evals.models import EvalJob, EvalRun, JobStatus, ProviderSpend
from registry.lifecycle import version_drain
from registry.models import Bundle, BundleVersion
from sessions_app.services import session_end, session_start
from tests.conftest import content, make_api
from tests.sessions_app.test_worker import worker  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-haiku-4-5"  # priced in the shipped model catalog
ITEMS = [
    {
        "id": "asks-order",
        "input": {"messages": [{"role": "user", "content": "I want a refund"}]},
        "expect": [{"type": "contains", "value": "order number"}],
    },
    {
        "id": "calls-tool",
        "input": {"messages": [{"role": "user", "content": "Refund order 1042"}]},
        "expect": [{"type": "tool_call", "name": "process_refund", "arguments": {"order_id": "1042"}}],
    },
]
KEY = "stand-in-secret-key-4711"


def script(fmt: str, body: dict, n: int) -> Reply:
    seen = json.dumps(body)
    if "1042" not in seen:
        return Reply(text="What is your order number?")
    if "Version two" in seen:
        return Reply(text="Refunded, have a nice day.")
    return Reply(calls=[Call("process_refund", {"order_id": "1042"})])


def providers_value(url: str) -> str:
    return json.dumps(
        [
            {"name": "standin", "format": "anthropic", "base_url": url, "key_env": "EVAL_STANDIN_KEY"},
            {"name": "standin-chat", "format": "openai-chat", "base_url": url + "/v1", "key_env": "EVAL_STANDIN_KEY"},
            {"name": "nowhere", "format": "anthropic", "base_url": "http://127.0.0.1:9", "key_env": "EVAL_STANDIN_KEY"},
            {"name": "standin-gemini", "format": "gemini", "base_url": url, "key_env": "EVAL_STANDIN_KEY"},
            # boto3 reads the AWS credentials chain itself (the fixture sets its variables).
            {"name": "standin-bedrock", "format": "bedrock-converse", "base_url": url},
        ]
    )


@pytest.fixture
def provider(monkeypatch, settings):
    """The stand-in, named in EVAL_PROVIDERS for this process (settings) and for the worker
    started after this fixture (the environment it inherits), its key in the environment."""
    with StandIn(script=script) as server:
        monkeypatch.setenv("EVAL_STANDIN_KEY", KEY)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "stand-in")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "stand-in")
        monkeypatch.setenv("EVAL_PROVIDERS", providers_value(server.url))
        settings.EVAL_PROVIDERS = endpoints.parse(providers_value(server.url))
        yield server


@pytest.fixture
def refunds(db):
    ops = make_api(Role.OPS, "eval-ops")
    ops.post("/api/v1/bundles/", {"name": "refunds"})
    for prompt in ("", "Version two."):
        body = {"content": content(prompt, model={"name": MODEL, "max_tokens": 512}), "message": "v"}
        assert ops.post("/api/v1/bundles/refunds/versions/", body).status_code == 201
    ops.post("/api/v1/suites/", {"name": "refund-evals"})
    suite = {"content": {"items": ITEMS}, "message": "m"}
    assert ops.post("/api/v1/suites/refund-evals/versions/", suite).status_code == 201
    return ops


def start(api, version=1, **body):
    return api.post(
        f"/api/v1/bundles/refunds/versions/{version}/evals/start/",
        {"suite": "refund-evals", "provider": "standin", **body},
    )


def wait_job(api, job_id: str, seconds: float = 60) -> dict:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        job = api.get(f"/api/v1/evals/jobs/{job_id}/").json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not finished within {seconds}s: {job}")


@pytest.mark.worker
def test_the_worker_runs_a_suite_through_the_sdk_and_records_the_run_and_its_check(provider, worker, refunds):  # noqa: F811
    ci = make_api(Role.CI, "ci-pipeline")
    answer = start(ci, runs=2, threshold=0.8)
    assert answer.status_code == 202, answer.content
    queued = answer.json()
    assert (queued["status"], queued["total"], queued["provider"], queued["model"]) == ("queued", 4, "standin", MODEL)

    job = wait_job(ci, queued["id"])
    assert job["status"] == "done", job
    assert job["done"] == 4 and job["spent_usd"] > 0
    run = ci.get(f"/api/v1/evals/{job['run']}/").json()
    assert (run["status"], run["passed"], run["total"], run["errors"]) == ("success", 4, 4, 0)
    assert run["provider"] == "standin" and run["created_by"] == "key:ci-pipeline"
    # What reached the provider is the turn call's request, through the official SDK, unrefused.
    assert len(provider.received) == 4 and provider.refused == []
    assert {r.body["model"] for r in provider.received} == {MODEL}
    assert [t["name"] for t in provider.received[0].body["tools"]] == ["process_refund"]
    checks = {c["name"]: c for c in ci.get("/api/v1/bundles/refunds/versions/1/checks/").json()["results"]}
    assert checks["eval:refund-evals"]["status"] == "success"
    assert checks["eval:refund-evals"]["evidence"]["run"] == job["run"]
    # The key is nowhere in what the registry stored or answers.
    assert KEY not in json.dumps(job) and KEY not in json.dumps(run)
    assert not EvalJob.objects.filter(detail__contains=KEY).exists()

    # v2 on the OpenAI Chat SDK fails the tool item; a provider that cannot be reached marks every reply error.
    second = wait_job(ci, start(ci, version=2, provider="standin-chat").json()["id"])
    failed = ci.get(f"/api/v1/evals/{second['run']}/").json()
    assert (second["status"], failed["status"], failed["passed"], failed["total"]) == ("done", "failure", 1, 2)
    body = {"content": content("Version three.", model={"name": MODEL}), "message": "v3"}
    assert refunds.post("/api/v1/bundles/refunds/versions/", body).status_code == 201
    gone = wait_job(ci, start(ci, version=3, provider="nowhere", threshold=0.5).json()["id"])
    unreached = ci.get(f"/api/v1/evals/{gone['run']}/").json()
    assert (unreached["errors"], unreached["passed"], unreached["status"]) == (2, 0, "failure")
    assert all("Connection" in r["reply"]["error"] for r in unreached["results"])


@pytest.mark.worker
@pytest.mark.parametrize(("name", "fmt"), [("standin-bedrock", "bedrock-converse"), ("standin-gemini", "gemini")])
def test_the_worker_runs_a_suite_through_boto3_and_google_genai(provider, worker, refunds, name, fmt):  # noqa: F811
    # Both SDKs are in the runtime lock (requirements.in), so start-up takes these providers.
    ci = make_api(Role.CI, "ci-pipeline")
    answer = start(ci, provider=name, threshold=1.0)
    assert answer.status_code == 202, answer.content
    job = wait_job(ci, answer.json()["id"])
    assert job["status"] == "done", job
    run = ci.get(f"/api/v1/evals/{job['run']}/").json()
    assert (run["status"], run["passed"], run["total"], run["errors"]) == ("success", 2, 2, 0), run["results"]
    assert run["provider"] == name
    assert [r.format for r in provider.received] == [fmt, fmt] and provider.refused == []
    calls = [r["reply"]["tool_calls"] for r in run["results"]]
    assert [{"name": "process_refund", "arguments": {"order_id": "1042"}}] in calls


@pytest.mark.worker
def test_a_candidate_version_is_evaluated_as_often_as_needed_and_stays_unreleased(provider, worker, refunds):  # noqa: F811
    ci = make_api(Role.CI, "ci-pipeline")
    first = wait_job(ci, start(ci).json()["id"])
    second = wait_job(ci, start(ci).json()["id"])
    assert (first["status"], second["status"]) == ("done", "done"), (first, second)
    runs = [ci.get(f"/api/v1/evals/{job['run']}/").json() for job in (first, second)]
    assert [(r["passed"], r["total"], r["errors"]) for r in runs] == [(2, 2, 0), (2, 2, 0)]
    assert len(provider.received) == 4
    # Its evaluation sessions ended without starting a drain: no label ever targeted it.
    v1 = BundleVersion.objects.get(bundle__name="refunds", number=1)
    assert (v1.state, v1.draining_since, v1.drained_at) == ("unreleased", None, None)


def test_a_drained_version_is_refused_at_run_start_with_the_reason(provider, refunds):
    # A session by number (not an evaluation's) made v1 draining; once it ended, v1 drained.
    bundle = Bundle.objects.get(name="refunds")
    agent = make_api(Role.AGENT, "agent")
    session, _ = session_start(
        bundle=bundle, actor=agent.actor, version=BundleVersion.objects.get(bundle=bundle, number=1)
    )
    session_end(session=session, actor=agent.actor)
    version_drain(version_id=session.version_id)
    assert BundleVersion.objects.get(pk=session.version_id).state == "drained"
    again = start(make_api(Role.CI))
    assert again.status_code == 400
    assert "version 1 is drained" in json.dumps(again.json()["error"]["details"]["items"])


def test_without_providers_the_registry_calls_no_model(settings, refunds):
    settings.EVAL_PROVIDERS = {}
    answer = start(make_api(Role.CI))
    assert answer.status_code == 400
    assert "EVAL_PROVIDERS" in answer.json()["error"]["message"]
    assert not EvalJob.objects.exists()


def test_everything_a_run_needs_is_checked_before_it_is_queued(provider, refunds, settings, monkeypatch):
    ci = make_api(Role.CI)
    assert start(make_api(Role.AGENT)).status_code == 403
    assert start(make_api(Role.PUBLISHER)).status_code == 403
    unknown = start(ci, provider="other")
    assert unknown.status_code == 400 and "standin" in json.dumps(unknown.json()["error"]["details"])
    bad_items = [{**item, "input": {**item["input"], "variables": {"tier": "gold"}}} for item in ITEMS]
    refunds.post("/api/v1/suites/refund-evals/versions/", {"content": {"items": bad_items}, "message": "vars"})
    listed = start(ci)
    assert listed.status_code == 400
    problems = listed.json()["error"]["details"]["items"]
    assert any("asks-order" in p for p in problems) and any("calls-tool" in p for p in problems)
    ok = start(ci, suite_version=1)
    assert ok.status_code == 202
    monkeypatch.delenv("EVAL_STANDIN_KEY")
    assert "EVAL_STANDIN_KEY is not set" in start(ci, suite_version=1).json()["error"]["message"]
    monkeypatch.setenv("EVAL_STANDIN_KEY", KEY)
    settings.EVAL_DAILY_BUDGET_USD = 0.0001
    spent = start(ci, suite_version=1)
    assert spent.status_code == 409 and spent.json()["error"]["code"] == "budget_spent"
    assert EvalJob.objects.count() == 1  # only the one that passed every check


def test_a_model_without_a_price_is_refused(provider, refunds):
    refunds.post("/api/v1/bundles/refunds/versions/", {"content": content("unpriced"), "message": "m-1"})
    answer = start(make_api(Role.CI), version=3)
    assert answer.status_code == 400
    assert "no price for m-1" in answer.json()["error"]["message"]


def test_a_model_the_catalog_says_has_retired_is_refused_before_the_run_is_queued(provider, refunds, settings):
    settings.MODEL_CLOCK_NOW = "2026-11-14T23:00:00Z"  # an hour before it retires
    ops = make_api(Role.OPS, "catalog-ops")
    body = {
        "facts": {"retires_at": "2026-11-15", "replacement": "claude-haiku-5"},
        "source": {"url": "https://example.test/deprecations", "read": "2026-10-30"},
        "reason": "the provider's notice",
    }
    assert ops.put(f"/api/v1/models/anthropic/{MODEL}/", body).status_code == 200
    assert start(make_api(Role.CI)).status_code == 202
    settings.MODEL_CLOCK_NOW = "2026-11-15T00:00:00Z"
    refused = start(make_api(Role.CI))
    assert refused.status_code == 400, refused.content
    assert "retired on 2026-11-15" in refused.json()["error"]["message"]
    assert "claude-haiku-5" in refused.json()["error"]["message"]
    assert EvalJob.objects.count() == 1 and provider.received == []


def test_a_run_stops_when_the_day_s_budget_is_spent_meanwhile_and_records_nothing(provider, refunds, settings):
    settings.EVAL_DAILY_BUDGET_USD = 1.0
    job_id = start(make_api(Role.CI)).json()["id"]
    jobs.spend_add(provider="playground", usd=1.0)  # another caller spent the rest of the day
    assert eval_worker.job_run(job_id) == JobStatus.STOPPED
    job = EvalJob.objects.get(pk=job_id)
    assert job.status == "stopped" and "budget" in job.detail and job.run is None
    assert not EvalRun.objects.exists() and provider.received == []
    assert eval_worker.job_run(job_id) == "not queued"  # a message delivered again does nothing
    assert ProviderSpend.objects.get(provider="playground").calls == 1


def test_a_job_whose_message_was_lost_is_sent_again_by_the_sweep(provider, refunds):
    job_id = start(make_api(Role.CI)).json()["id"]
    EvalJob.objects.filter(pk=job_id).update(created_at=EvalJob.objects.get(pk=job_id).created_at - jobs.REQUEUE_AFTER)
    assert jobs.jobs_sweep() == [job_id]
    assert eval_worker.job_run(job_id) == JobStatus.DONE
    assert len(provider.received) == 2


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"EVAL_PROVIDERS": "{nope"}, "not JSON"),
        ({"EVAL_PROVIDERS": '[{"name": "a", "format": "cohere"}]'}, "format: one of"),
        ({"EVAL_PROVIDERS": '[{"name": "a", "format": "gemini", "api_key": "sk-1"}]'}, "an object with"),
        ({"EVAL_PROVIDERS": '[{"name": "a", "format": "gemini", "key_env": "lower"}]'}, "key_env"),
        ({"EVAL_PROVIDERS": '[{"name": "a", "format": "gemini", "base_url": "file:///etc"}]'}, "base_url"),
        ({"EVAL_PROVIDERS": '[{"name": "a", "format": "gemini"}, {"name": "a", "format": "anthropic"}]'}, "once"),
        ({"EVAL_DAILY_BUDGET_USD": "lots"}, "must be a number"),
        ({"EVAL_DAILY_BUDGET_USD": "-1"}, "between 0"),
        ({"EVAL_CALL_TIMEOUT": "0"}, "between 1 and 600"),
    ],
)
def test_a_bad_provider_setting_stops_the_start_saying_what_is_wrong(environ, said):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=said):
        endpoints.from_environment(environ)
    assert endpoints.from_environment({}) == ({}, 5.0, 60)


def test_a_provider_whose_sdk_is_not_installed_is_refused_at_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setitem(endpoints.SDKS, "gemini", "no_such_sdk_module")
    with pytest.raises(ImproperlyConfigured, match="no_such_sdk_module SDK, which is not installed"):
        endpoints.from_environment({"EVAL_PROVIDERS": '[{"name": "g", "format": "gemini"}]'})
