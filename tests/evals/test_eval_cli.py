"""`promptreg eval` end to end: a suite imported from JSONL and from a GitHub Models .prompt.yml,
run on two versions through real pinned sessions, the turn call and each provider's official
SDK against the project's provider stand-in (devtools/provider_standin.py, which refuses what
the provider refuses), recorded as checks, and compared."""

import json

import pytest
from promptreg.cli import main

from access.models import Role
from devtools.provider_standin import Call, Reply, StandIn
from tests.conftest import content, make_api
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

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


def script(fmt: str, body: dict, n: int) -> Reply:
    """The scripted model: under v1's prompt "Refund order 1042" calls process_refund, under
    v2's ("Version two.") it answers in words; anything else is asked for its order number."""
    seen = json.dumps(body)
    if "1042" not in seen:
        return Reply(text="What is your order number?")
    if "Version two" in seen:
        return Reply(text="Refunded, have a nice day.")
    return Reply(calls=[Call("process_refund", {"order_id": "1042"})])


# --provider and where its SDK reaches the stand-in (the OpenAI SDK's base URL ends in /v1).
PROVIDERS = {"anthropic": "", "openai": "/v1", "openai-responses": "/v1", "gemini": "", "bedrock": ""}


@pytest.fixture
def provider(monkeypatch):
    # The keys each SDK reads from the environment, as on a real machine.
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "local-stand-in")
    with StandIn(script=script) as server:
        yield server


@pytest.fixture
def cli(registry_server, capsys):  # noqa: F811
    ops = make_api(Role.OPS, name="eval-ops")

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(["--url", registry_server.url, "--api-key", ops.secret, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    ops.post("/api/v1/bundles/", {"name": "refunds"})
    for prompt in ("", "Version two."):
        ops.post("/api/v1/bundles/refunds/versions/", {"content": content(prompt), "message": "v"})
    return run


def test_a_suite_runs_on_two_versions_through_the_sdk_and_each_gets_its_check(cli, provider, tmp_path):
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in ITEMS) + "\n")
    assert cli("eval", "import", "refund-evals", str(suite))[0] == 0

    args = ["--suite", "refund-evals", "--provider", "anthropic", "--base-url", provider.url, "--runs", "2"]
    status, out, err = cli("eval", "run", "refunds", "--version", "1", *args, "--threshold", "0.8")
    assert status == 0, out + err
    assert "eval:refund-evals success: 4/4" in out
    assert "4 model calls on m-1 (anthropic)" in err
    # What reached the provider is the turn call's request: the pinned model, tools and prompt.
    assert len(provider.received) == 4 and provider.refused == []
    assert {r.body["model"] for r in provider.received} == {"m-1"}
    assert [t["name"] for t in provider.received[0].body["tools"]] == ["process_refund"]

    status, out, err = cli("eval", "run", "refunds", "--version", "2", *args, "--threshold", "0.8", "--json")
    assert status == 1
    bad = json.loads(out)
    assert (bad["status"], bad["passed"], bad["total"]) == ("failure", 2, 4)

    checks = {
        c["name"]: c for c in make_api(Role.AGENT).get("/api/v1/bundles/refunds/versions/2/checks/").json()["results"]
    }
    assert checks["eval:refund-evals"]["status"] == "failure"

    first = make_api(Role.OPS).get("/api/v1/bundles/refunds/versions/1/evals/").json()["results"][0]["id"]
    status, out, _ = cli("eval", "compare", first, bad["id"])
    assert status == 0 and out.splitlines()[1].startswith("broken  calls-tool: 100% -> 0%")


@pytest.mark.parametrize("provider_name", sorted(PROVIDERS))
def test_every_provider_sdk_runs_the_suite_and_the_stand_in_refuses_nothing(cli, provider, tmp_path, provider_name):
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in ITEMS))
    cli("eval", "import", "refund-evals", str(suite))
    url = provider.url + PROVIDERS[provider_name]
    status, out, err = cli(
        "--json", "eval", "run", "refunds", "--version", "1", "--suite", "refund-evals", "--provider", provider_name,
        "--base-url", url,
    )  # fmt: skip
    assert status == 0, out + err
    run = json.loads(out)
    assert (run["passed"], run["errors"], run["total"]) == (2, 0, 2)
    assert len(provider.received) == 2 and provider.refused == []


def test_a_provider_that_cannot_be_reached_marks_every_item_error_and_the_run_goes_on(cli, provider, tmp_path):
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in ITEMS))
    cli("eval", "import", "refund-evals", str(suite))
    status, out, _ = cli(
        "--json", "eval", "run", "refunds", "--version", "1", "--suite", "refund-evals", "--provider", "anthropic",
        "--base-url", "http://127.0.0.1:9", "--threshold", "0.5",
    )  # fmt: skip
    run = json.loads(out)
    assert status == 1 and (run["passed"], run["errors"], run["total"], run["status"]) == (0, 2, 2, "failure")
    assert all(r["passed"] is False and "Connection" in r["reply"]["error"] for r in run["results"])


def test_items_the_version_cannot_take_are_all_named_before_any_model_call(cli, provider, tmp_path):
    items = [{**item, "input": {**item["input"], "variables": {"tier": "gold"}}} for item in ITEMS]
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in items))
    cli("eval", "import", "refund-evals", str(suite))
    status, _, err = cli(
        "eval", "run", "refunds", "--version", "1", "--suite", "refund-evals", "--provider", "anthropic",
        "--base-url", provider.url,
    )  # fmt: skip
    assert status == 1
    assert "item asks-order: variables.tier" in err and "item calls-tool: variables.tier" in err
    assert provider.received == []


def test_a_github_models_prompt_file_becomes_a_suite(cli, provider, tmp_path):
    (tmp_path / "refund.prompt.yml").write_text(
        "name: Refunds\n"
        "model: openai/gpt-4o\n"
        "messages:\n"
        "  - role: system\n"
        "    content: You are a refund agent.\n"
        "  - role: user\n"
        "    content: 'I want a refund for {{what}}'\n"
        "testData:\n"
        "  - what: my shoes\n"
        "    expected: order number\n"
        "  - what: a lamp\n"
        "evaluators:\n"
        "  - name: asks for the order\n"
        "    string:\n"
        "      contains: 'order number'\n"
    )
    status, out, err = cli("eval", "import", "gh-evals", str(tmp_path / "refund.prompt.yml"))
    assert status == 0, err
    assert "gh-evals version 1" in out and "2 items" in out
    suite = make_api(Role.AGENT).get("/api/v1/suites/gh-evals/versions/1/").json()["content"]
    first = suite["items"][0]
    assert first["input"]["messages"] == [{"role": "user", "content": "I want a refund for my shoes"}]
    assert first["expect"] == [{"type": "contains", "value": "order number"}]
    args = ["--suite", "gh-evals", "--provider", "anthropic", "--base-url", provider.url]
    assert cli("eval", "run", "refunds", "--version", "1", *args)[0] == 0


def test_max_cost_without_a_price_is_refused_before_any_model_call(cli, provider, tmp_path):
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in ITEMS))
    cli("eval", "import", "refund-evals", str(suite))
    args = ["--suite", "refund-evals", "--provider", "anthropic", "--base-url", provider.url, "--max-cost", "0.5"]
    status, _, err = cli("eval", "run", "refunds", "--version", "1", *args)
    assert status == 2
    assert "--max-cost 0.5 cannot be kept" in err and "no price for m-1" in err
    assert provider.received == []


def test_the_cli_evaluates_a_candidate_as_often_as_needed_and_it_stays_unreleased(cli, provider, tmp_path):
    # The CLI's sessions are evaluation sessions (`"evaluation": true` with `version`): without
    # it the first run's sessions made the unreleased version drain and the second was refused.
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in ITEMS))
    cli("eval", "import", "refund-evals", str(suite))
    ops = make_api(Role.OPS)
    assert ops.get("/api/v1/bundles/refunds/versions/2/").json()["state"] == "unreleased"
    args = ["--suite", "refund-evals", "--provider", "anthropic", "--base-url", provider.url, "--json"]
    for _ in range(2):
        status, out, err = cli("eval", "run", "refunds", "--version", "2", *args)
        assert json.loads(out)["total"] == 2, out + err
    assert ops.get("/api/v1/bundles/refunds/versions/2/").json()["state"] == "unreleased"
    assert len(provider.received) == 4


def test_evaluation_is_refused_without_a_version(cli):
    agent = make_api(Role.AGENT)
    answer = agent.post("/api/v1/sessions/", {"bundle": "refunds", "evaluation": True})
    assert answer.status_code == 400 and "evaluation" in answer.json()["error"]["details"]
    answer = agent.post("/api/v1/sessions/", {"bundle": "refunds", "version": 1, "evaluation": "yes"})
    assert answer.status_code == 400 and "evaluation" in answer.json()["error"]["details"]
