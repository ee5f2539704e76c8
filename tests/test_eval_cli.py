"""`promptreg eval` end to end: a suite imported from JSONL and from a GitHub Models .prompt.yml,
run on two versions through real pinned sessions, the turn call and the official Anthropic SDK
against a local stand-in of the provider, recorded as checks, and compared."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from promptreg.cli import main

from access.models import Role
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


class Provider:
    """A stand-in of Anthropic's Messages API on 127.0.0.1 that refuses a request without a model
    or messages, and answers by the pinned system prompt: under v1's prompt "Refund order 1042"
    calls process_refund, under v2's it does not; a message saying "explode" gets a 529."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                provider.requests.append(body)
                status, answer = provider.answer(body)
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> tuple[int, dict]:
        if not body.get("model") or not body.get("messages"):
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": "model: required"}}
        system = json.dumps(body.get("system", ""))
        last = json.dumps(body["messages"][-1]["content"])
        if "explode" in last:
            return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        good = "Version two" not in system
        if "1042" not in last:
            block = {"type": "text", "text": "What is your order number?"}
        elif good:
            block = {"type": "tool_use", "id": "toolu_1", "name": "process_refund", "input": {"order_id": "1042"}}
        else:
            block = {"type": "text", "text": "Refunded, have a nice day."}
        usage = {"input_tokens": 100, "output_tokens": 20}
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": [block]}
        return 200, {**message, "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}


@pytest.fixture
def provider(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local-stand-in")  # read by the SDK, as on a real machine
    server = Provider()
    yield server
    server.server.shutdown()


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
    assert len(provider.requests) == 4
    assert {r["model"] for r in provider.requests} == {"m-1"}
    assert [t["name"] for t in provider.requests[0]["tools"]] == ["process_refund"]

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


def test_a_provider_error_marks_the_item_error_and_the_run_goes_on(cli, provider, tmp_path):
    items = [*ITEMS, {**ITEMS[0], "id": "explodes", "input": {"messages": [{"role": "user", "content": "explode"}]}}]
    suite = tmp_path / "items.jsonl"
    suite.write_text("\n".join(json.dumps(item) for item in items))
    cli("eval", "import", "refund-evals", str(suite))
    status, out, _ = cli(
        "--json", "eval", "run", "refunds", "--version", "1", "--suite", "refund-evals", "--provider", "anthropic",
        "--base-url", provider.url, "--threshold", "0.5",
    )  # fmt: skip
    run = json.loads(out)
    assert status == 0 and (run["passed"], run["errors"], run["total"]) == (2, 1, 3)
    exploded = next(r for r in run["results"] if r["item"] == "explodes")
    assert exploded["passed"] is False and "529" in exploded["reply"]["error"]


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
    assert provider.requests == []


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
