"""`promptreg` (prompts as code) against the real running service: push, pull, diff."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from promptreg.cli import main

from access.models import Role
from registry.models import BundleVersion
from tests.conftest import make_api
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}


@pytest.fixture
def cli(registry_server, capsys):  # noqa: F811
    """Run `promptreg` in-process as a publisher (ops for production); returns (status, out, err)."""
    ops = make_api(Role.OPS, name="cli-ops")

    def run(*argv: str, key: str | None = None) -> tuple[int, str, str]:
        status = main(["--url", registry_server.url, "--api-key", key or ops.secret, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def write_bundle(root: Path, *, prompt: str = "Refund orders with `process_refund`.\n", tools=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "prompt.md").write_bytes(prompt.encode())
    (root / "tools").mkdir(exist_ok=True)
    for tool in tools or [{"name": "process_refund", "description": "Refund an order.", "input_schema": SCHEMA}]:
        (root / "tools" / f"{tool['name']}.json").write_text(json.dumps(tool, indent=2))
    (root / "guardrails.json").write_text(json.dumps({"default": "allow", "rules": []}))
    (root / "model.json").write_text('{"name": "m-1", "temperature": 0}\n')
    return root


def test_push_publishes_once_and_then_reports_unchanged(cli, tmp_path):
    source = write_bundle(tmp_path / "refunds")
    status, out, _ = cli("push", str(source), "--bundle", "refunds", "--message", "first")
    assert status == 0 and "created bundle refunds" in out and "published refunds version 1" in out
    status, out, _ = cli("push", str(source), "--bundle", "refunds", "--message", "again")
    assert (status, out.strip()) == (0, "unchanged, version 1")
    status, out, _ = cli("--json", "push", str(source), "--bundle", "refunds")
    doc = json.loads(out)
    assert status == 0 and doc["version"] == 1 and doc["created"] is False
    assert BundleVersion.objects.filter(bundle__name="refunds").count() == 1


def test_push_moves_a_label_with_a_reason_and_refuses_a_breaking_move(cli, tmp_path):
    source = write_bundle(tmp_path / "b")
    status, out, _ = cli("push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "first")
    assert status == 0 and "production: (new) -> version 1" in out
    status, out, _ = cli("push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "again")
    assert status == 0 and "unchanged, version 1" in out and "production already targets version 1" in out
    assert cli("push", str(source), "--bundle", "refunds", "--label", "production")[0] == 2  # no --reason

    renamed = {"name": "issue_refund", "description": "Refund an order.", "input_schema": SCHEMA}
    (source / "tools" / "process_refund.json").unlink()
    (source / "tools" / "issue_refund.json").write_text(json.dumps(renamed))
    (source / "prompt.md").write_text("Refund orders with `issue_refund`.\n")
    status, out, err = cli("push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "rename")
    assert status == 1 and "published refunds version 2" in out
    assert "production not moved" in err and "tool" in err and "--allow-breaking" in err
    status, out, _ = cli(
        "push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "rename", "--allow-breaking"
    )
    assert status == 0 and "production: 1 -> version 2" in out


def test_pull_then_push_is_a_no_op(cli, tmp_path):
    tools = [  # not in alphabetical order: the order is part of the content hash
        {"name": "zeta", "description": "Last by name, first in the list.", "input_schema": SCHEMA},
        {"name": "alpha", "description": "Ünïcødé stays as it is.", "input_schema": SCHEMA},
    ]
    source = write_bundle(tmp_path / "src", prompt="Line one.\r\nLine two, no newline at the end", tools=tools)
    (source / "tools" / "ORDER").write_text("zeta\nalpha\n")
    (source / "output_schema.json").write_text(json.dumps({"type": "object"}))
    (source / "metadata.json").write_text(json.dumps({"owner": "payments"}))
    assert cli("push", str(source), "--bundle", "roundtrip")[0] == 0
    version = BundleVersion.objects.get(bundle__name="roundtrip", number=1)
    assert [t["name"] for t in json.loads(bytes(version.canonical))["tools"]] == ["zeta", "alpha"]

    pulled = tmp_path / "pulled"
    (pulled / "tools").mkdir(parents=True)
    (pulled / "tools" / "stale.json").write_text("{}")  # from an older pull: removed
    (pulled / "README.md").write_text("not part of the bundle")  # left alone
    status, out, _ = cli("pull", "roundtrip", "--version", "1", str(pulled))
    assert status == 0 and "pulled roundtrip version 1" in out
    files = sorted(p.relative_to(pulled).as_posix() for p in pulled.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "guardrails.json",
        "metadata.json",
        "model.json",
        "output_schema.json",
        "prompt.md",
        "tools/ORDER",
        "tools/alpha.json",
        "tools/zeta.json",
    ]
    # Stored and pulled with LF (issue 35): equal text is equal bytes, whichever editor saved it.
    assert (pulled / "prompt.md").read_bytes() == b"Line one.\nLine two, no newline at the end"
    status, out, _ = cli("push", str(pulled), "--bundle", "roundtrip")
    assert (status, out.strip()) == (0, "unchanged, version 1")
    status, out, _ = cli("push", str(source), "--bundle", "roundtrip")  # the CRLF original again
    assert (status, out.strip()) == (0, "unchanged, version 1")

    cli("push", str(pulled), "--bundle", "roundtrip", "--label", "staging", "--reason", "try")
    by_label = tmp_path / "by-label"
    assert cli("--json", "pull", "roundtrip", "--label", "staging", str(by_label))[0] == 0
    assert cli("push", str(by_label), "--bundle", "roundtrip")[1].strip() == "unchanged, version 1"


def test_errors_name_the_exact_place_and_exit_non_zero(cli, tmp_path):
    source = write_bundle(tmp_path / "bad")
    (source / "tools" / "process_refund.json").write_text('{\n  "name": "process_refund",\n  "description": oops\n}')
    status, _, err = cli("push", str(source), "--bundle", "refunds")
    assert status == 1 and "tools/process_refund.json:3:18: Expecting value" in err

    broken = {"name": "process_refund", "description": "Refund.", "input_schema": "not a schema"}
    (source / "tools" / "process_refund.json").write_text(json.dumps(broken))
    status, _, err = cli("push", str(source), "--bundle", "refunds")
    assert status == 1 and "tools/process_refund.json: input_schema: Must be a JSON Schema object." in err
    status, out, _ = cli("--json", "push", str(source), "--bundle", "refunds")
    (error,) = json.loads(out)["errors"]
    assert error["place"] == "tools/process_refund.json: input_schema" and status == 1

    (source / "prompt.md").unlink()
    status, _, err = cli("push", str(source), "--bundle", "refunds")
    assert status == 1 and "prompt.md: missing" in err


def test_contract_warnings_are_printed_with_their_place(cli, tmp_path):
    loose = {"name": "lookup", "description": "Look up an order.", "input_schema": {"properties": {}}}
    source = write_bundle(tmp_path / "w", prompt="Find orders with `lookup`.", tools=[loose])
    status, _, err = cli("push", str(source), "--bundle", "warned")
    assert status == 0
    assert "warning: tools/lookup.json: input_schema.type: Declare" in err


def test_diff_prints_the_level_and_the_changes(cli, tmp_path):
    source = write_bundle(tmp_path / "d")
    cli("push", str(source), "--bundle", "refunds")
    (source / "prompt.md").write_text("Refund orders politely with `process_refund`.")
    cli("push", str(source), "--bundle", "refunds")
    status, out, _ = cli("diff", "refunds", "1", "2")
    assert status == 0 and out.splitlines()[0] in ("refunds v1 -> v2: minor", "refunds v1 -> v2: patch")
    assert "system_prompt" in out
    status, out, _ = cli("--json", "diff", "refunds", "1", "2")
    doc = json.loads(out)
    assert (doc["from_version"], doc["to_version"]) == (1, 2) and doc["changes"]
    assert cli("diff", "refunds", "1", "9")[0] == 1  # no version 9


def test_the_installed_command_reads_the_registry_from_the_environment(registry_server, tmp_path):  # noqa: F811
    publisher = make_api(Role.PUBLISHER, name="cli-env")
    source = write_bundle(tmp_path / "env")
    # PYTHONPATH: this checkout's client, whichever checkout the shared virtualenv last installed.
    client = str(Path(__file__).resolve().parents[2] / "client")
    env = {
        **os.environ,
        "PYTHONPATH": client,
        "REGISTRY_URL": registry_server.url,
        "REGISTRY_API_KEY": publisher.secret,
    }
    command = Path(sys.executable).parent / "promptreg"
    done = subprocess.run([command, "push", source, "--bundle", "from-env"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "published from-env version 1" in done.stdout
    missing = {k: v for k, v in env.items() if not k.startswith("REGISTRY_")}
    done = subprocess.run([command, "catalog"], env=missing, capture_output=True, text=True)
    assert done.returncode == 2 and "REGISTRY_URL" in done.stderr


def test_check_report_records_a_check_with_a_ci_key(cli, tmp_path):
    source = write_bundle(tmp_path / "refunds")
    assert cli("push", str(source), "--bundle", "refunds", "--message", "first")[0] == 0
    ci = make_api(Role.CI, name="cli-ci")
    status, out, _ = cli(
        "--json",
        "check",
        "report",
        "refunds",
        "1",
        "--name",
        "evals",
        "--status",
        "success",
        "--summary",
        "0.93",
        "--details-url",
        "https://ci.example/run/1",
        key=ci.secret,
    )
    doc = json.loads(out)
    assert status == 0 and (doc["name"], doc["status"], doc["summary"]) == ("evals", "success", "0.93")
    version = BundleVersion.objects.get(bundle__name="refunds", number=1)
    assert doc["content_hash"] == version.content_hash
    status, _, err = cli("check", "report", "refunds", "1", "--name", "Bad Name", "--status", "success", key=ci.secret)
    assert status == 1 and "error" in err
    status, _, err = cli("check", "report", "refunds", "9", "--name", "evals", "--status", "success", key=ci.secret)
    assert status == 1


def test_push_says_when_a_label_move_became_a_change_request(cli, tmp_path):
    from registry.models import Bundle, Change
    from registry.services import label_policy_set

    source = write_bundle(tmp_path / "refunds")
    assert cli("push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "first")[0] == 0
    ops = make_api(Role.OPS, name="policy-ops")
    bundle = Bundle.objects.get(name="refunds")
    label_policy_set(
        bundle=bundle, name="production", changes={"required_approvals": 1}, actor=ops.actor, reason="four eyes"
    )
    write_bundle(source, prompt="Refund orders with `process_refund`, politely.\n")
    status, out, _ = cli("push", str(source), "--bundle", "refunds", "--label", "production", "--reason", "v2")
    change = Change.objects.get()
    assert status == 0
    assert f"production not moved yet: change {change.pk} waits for 1 approval(s)" in out


def test_push_pins_mcp_tools_from_this_machine_as_the_registry_would(cli, tmp_path):
    from tests.mcp_server.test_mcp_tools import McpServer

    server = McpServer()
    server.start(1)
    try:
        source = write_bundle(tmp_path / "orders", prompt="Orders agent.\n", tools=[])
        declared = [{"name": "orders", "url": server.url, "tools": ["lookup_order", "cancel_order"]}]
        (source / "mcp_servers.json").write_text(json.dumps(declared))
        status, out, err = cli("push", str(source), "--bundle", "orders", "--message", "m", "--pin-mcp")
        assert status == 0, err
        assert "pinned lookup_order from its MCP server" in out
        pinned_here = BundleVersion.objects.get(bundle__name="orders")
        # The registry pins the same declaration itself to the same bytes.
        status, out, err = cli("push", str(source), "--bundle", "orders-server", "--message", "m")
        assert status == 0, err
        assert BundleVersion.objects.get(bundle__name="orders-server").content_hash == pinned_here.content_hash

        server.start(3)  # cancel_order is gone
        status, _, err = cli("push", str(source), "--bundle", "orders-3", "--message", "m", "--pin-mcp")
        assert status == 1 and "does not offer cancel_order" in err
    finally:
        server.stop()


def test_mcp_check_reports_drift_and_exits_non_zero(cli, tmp_path):
    from tests.mcp_server.test_mcp_tools import McpServer

    server = McpServer()
    server.start(1)
    try:
        source = write_bundle(tmp_path / "orders", prompt="Orders agent.\n", tools=[])
        declared = [{"name": "orders", "url": server.url, "tools": ["lookup_order"]}]
        (source / "mcp_servers.json").write_text(json.dumps(declared))
        args = ("--label", "production", "--reason", "first")
        assert cli("push", str(source), "--bundle", "orders", "--message", "m", *args)[0] == 0
        status, out, _ = cli("mcp", "check")
        assert status == 0 and "1 pinned tool(s) compared, 0 drift(s)" in out
        server.start(2)
        status, out, err = cli("mcp", "check")
        assert status == 1 and "orders@1: lookup_order from orders changed" in out and "drift found" in err
    finally:
        server.stop()
