"""README.md as a reader uses it: `make run`'s own stack (python -m devtools.stack run, with its
own Redis and demo keys), then every shell block pasted in the README's order into one bash
session, in a directory laid out like a checkout (`.run/` is the stack's); the Python block runs
with the venv's python inside that session, as the README says. Nothing is put in place that the
reader does not have: the keys, the bundle names and the server's URL come from the blocks
themselves and `.run/demo.env`. The only stand-in is the `claude` command (Claude Code is not on
this machine): it records its arguments, and the test connects to /mcp with them.

The whole sequence is pasted twice (the README says it can be), then a second `make run` is
refused, and a restart keeps the demo keys and the admin password."""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from devtools.stack import free_port
from tests.live import database_url

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.worker

# Blocks a reader does not paste into the walkthrough's shell: starting the stack (the test starts
# it), the suite, an agent host's JSON file, the Docker deployment (tests/project/test_compose.py), and a CI
# job's script (it needs a CI system's variables; tests/registry/test_checks.py covers what it calls).
# The TypeScript agent loop runs in tests/client/test_typescript_client.py, from the installed tarball.
NOT_IN_SESSION = {"make run", "make-test-external", "mcp-json", "compose", "ci-job", "agent-loop-ts"}


@dataclass
class Block:
    lang: str
    code: str
    marker: str  # the `<!-- readme-test: NAME -->` above it, or the section's heading


def readme_blocks() -> list[Block]:
    blocks = []
    heading = ""
    pattern = r"^(## [^\n]*)$|(?:<!-- readme-test: ([\w-]+) -->\n)?^```(\w*)\n(.*?)^```"
    for match in re.finditer(pattern, README, re.M | re.S):
        if match.group(1):
            heading = match.group(1)[3:]
            continue
        code = match.group(4)
        marker = match.group(2) or heading
        if match.group(3) == "sh" and re.match(r"make run\b", code):
            marker = "make run"
        elif match.group(3) == "sh" and "make test" in code and not match.group(2):
            marker = "make-test-external"
        blocks.append(Block(lang=match.group(3), code=code, marker=marker))
    return blocks


def test_every_block_is_either_pasted_or_named_as_not_pasted():
    blocks = readme_blocks()
    assert {b.lang for b in blocks} <= {"sh", "python", "json", "ts"}, "a block in a language the session cannot run"
    assert {b.marker for b in blocks if b.lang == "json"} == {"mcp-json"}
    assert {b.marker for b in blocks if b.lang == "ts"} == {"agent-loop-ts"}
    pasted = [b.marker for b in blocks if b.marker not in NOT_IN_SESSION]
    assert pasted[:2] == ["Walkthrough: pinning, draining and rollback over HTTP", "agent-loop"]
    assert pasted[2:] == ["push-pull", "mcp-claude", "Releasing safely: ramps, atomic releases, If-Match"]


def _session_script(blocks: list[Block], rounds: int) -> str:
    lines = [
        # The one stand-in: records what Claude Code would be given, after the shell's expansion.
        'claude() { python3 -c \'import json, sys; print("claude argv", json.dumps(sys.argv[1:]))\' "$@"; }'
    ]
    for round_ in range(rounds):
        for index, block in enumerate(blocks):
            if block.marker in NOT_IN_SESSION:
                continue
            lines.append(f"echo '@@ {round_} {index} {block.marker}'")
            if block.lang == "python":
                # As the README says: pasted after `.venv/bin/python - <<'EOF'` in the checkout.
                lines.append(f".venv/bin/python - <<'README_PY_EOF'\n{block.code}README_PY_EOF")
            else:
                lines.append(block.code)
    return "\n".join(lines) + "\n"


def _outputs(stdout: str) -> dict[tuple[int, str], str]:
    """What each block printed, by (round, marker)."""
    found: dict[tuple[int, str], str] = {}
    parts = re.split(r"^@@ (\d+) \d+ (.*)$\n", stdout, flags=re.M)
    for round_, marker, text in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        found[(int(round_), marker)] = text
    return found


def _json_replies(text: str) -> list[dict]:
    replies = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            replies.append(value)
    return replies


class Stack:
    """`python -m devtools.stack run` (what `make run` runs) with its output collected."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.stack", "run"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for_banner(self, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = re.findall(r"Prompt registry ready on (.*?\n={78}\n)", "".join(self.lines), re.S)
            if found:
                return found[-1]
            assert self.proc.poll() is None, "".join(self.lines[-40:])
            time.sleep(0.2)
        raise AssertionError("no banner:\n" + "".join(self.lines[-40:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture
def checkout(tmp_path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A directory like a checkout, whose .run/ is the stack's, and the stack's environment:
    its own database on the test's PostgreSQL server (dropped afterwards) and its own Redis."""
    database = f"readme_{os.getpid()}"
    server = database_url().rsplit("/", 1)[0]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"}}
    env.update(
        DATABASE_URL=f"{server}/{database}",
        PORT=str(port),
        STACK_RUN_DIR=str(tmp_path / ".run"),
        DJANGO_SETTINGS_MODULE="config.settings",
        WEB_CONCURRENCY="1",
    )
    # The checkout's virtualenv, where `make run` put it (the README's blocks use .venv/bin/...).
    (tmp_path / ".venv").symlink_to(BIN.parent)
    yield tmp_path, env
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _mcp(url: str, headers: dict[str, str]) -> tuple[set[str], list[str]]:
    async def scenario():
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            catalog = (await client.call_tool("list_capabilities", {})).structured_content
            return tools, [c["name"] for c in catalog["capabilities"]]

    return asyncio.run(scenario())


RELEASE_OUTPUT = [
    "[{'version': 1, 'weight': 90}, {'version': 2, 'weight': 10}]",
    "alice keeps her version",
    "[{'version': 1, 'weight': 50}, {'version': 2, 'weight': 50}]",
    "[{'version': 1, 'weight': 100}]",
    "2",
    "precondition_failed",
    "[{'version': 1, 'starts_draining': True, 'active_sessions': 0}]",
    "True",
    "True",
    "1",
]
WALKTHROUGH = "Walkthrough: pinning, draining and rollback over HTTP"
RELEASING = "Releasing safely: ramps, atomic releases, If-Match"


def _check_round(outputs: dict[tuple[int, str], str], round_: int) -> str:
    """The promises of each block's comments, for one paste of the whole README. Returns the
    walkthrough's bundle name."""
    walk = outputs[(round_, WALKTHROUGH)]
    plain = [line for line in walk.splitlines() if re.fullmatch(r"[a-z0-9 ]+|A unchanged", line)]
    # A kept its bytes, B got v2, v1 drained once A ended, and C (after the rollback) got v1.
    assert plain == ["A unchanged", "2", "draining", "drained", "1"], walk
    errors = [reply["error"] for reply in _json_replies(walk) if "error" in reply]
    # The one refusal: the first move to v2, as a breaking change; with allow_breaking it passes.
    assert [error["code"] for error in errors] == ["conflict"], errors
    assert [change["kind"] for change in errors[0]["details"]["changes"]] == ["tool_renamed"]

    # The loop's stand-in model saw the walkthrough's production (v1) tools, once.
    assert outputs[(round_, "agent-loop")].splitlines() == ["['process_refund']"]

    pushed = outputs[(round_, "push-pull")]
    name = re.search(r"pulled (refunds-\d+) version 1", pushed).group(1)
    assert "unchanged, version 1" in pushed
    assert f"published {name} version 3" in pushed and "staging: (new) -> version 3" in pushed
    assert f"{name} v1 -> v3:" in pushed and "system_prompt" in pushed

    released = outputs[(round_, RELEASING)]
    assert [line for line in released.splitlines() if line] == RELEASE_OUTPUT, released
    return name


@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("curl")), reason="needs bash and curl")
def test_the_readme_pasted_in_order_into_one_shell_against_make_run(checkout):
    directory, env = checkout
    port = env["PORT"]
    stack = Stack(env)
    try:
        first_banner = stack.wait_for_banner(240)
        assert f"http://127.0.0.1:{port}/" in first_banner

        blocks = readme_blocks()
        session_env = {
            k: v for k, v in os.environ.items() if not k.endswith("_KEY") and not k.startswith(("REGISTRY_", "NAME"))
        }
        # A reader's shell: the virtualenv is not on PATH (nothing activated it), no PYTHONPATH.
        session_env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != BIN)
        session_env.pop("PYTHONPATH", None)
        session_env.pop("VIRTUAL_ENV", None)
        result = subprocess.run(
            ["bash"],
            input=_session_script(blocks, rounds=2),
            cwd=directory,
            env=session_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stderr == "", result.stderr[-3000:]
        outputs = _outputs(result.stdout)
        names = [_check_round(outputs, round_) for round_ in (0, 1)]
        assert names[0] != names[1], "the second paste makes a new bundle"
        assert sorted(p.name for p in directory.iterdir()) == [".run", ".venv"], "the blocks left files behind"

        # Claude Code would be given the running server's /mcp and the agent key: they work.
        argv = json.loads(outputs[(1, "mcp-claude")].removeprefix("claude argv "))
        assert argv[:5] == ["mcp", "add", "--transport", "http", "prompt-registry"]
        url = argv[5]
        header_name, header_value = argv[argv.index("--header") + 1].split(": ", 1)
        tools, catalog = _mcp(url, {header_name: header_value})
        assert {"list_capabilities", "get_capability_protocol", "end_session", "take_turn", "read"} <= tools
        assert set(names) <= set(catalog)
        config = json.loads(next(b.code for b in blocks if b.marker == "mcp-json"))["mcpServers"]["prompt-registry"]
        assert config["type"] == "http" and config["url"] == "http://127.0.0.1:8000/mcp"
        agent_key = header_value.removeprefix("Bearer ")
        headers = {k: v.replace("pr_your_agent_key", agent_key) for k, v in config["headers"].items()}
        assert set(names) <= set(_mcp(url, headers)[1])

        # A second `make run` in the same checkout is refused, naming this one.
        second = subprocess.run(
            [sys.executable, "-m", "devtools.stack", "run"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert f"already running in this checkout (pid {stack.proc.pid}, port {port})" in second.stderr
        assert stack.proc.poll() is None

        # A restart keeps the keys (a configured agent host keeps working) and the password.
        demo = (directory / ".run" / "demo.env").read_text()
        password = re.search(r"user admin, password (\S+)", first_banner).group(1)
        stack.stop()
        assert stack.proc.returncode == 0, "".join(stack.lines[-30:])
        stack = Stack(env)
        second_banner = stack.wait_for_banner(120)
        assert f"user admin, password {password}" in second_banner
        assert (directory / ".run" / "demo.env").read_text() == demo
        assert f"AGENT_KEY={agent_key}" in second_banner
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/bundles/{names[0]}/", headers={"Authorization": header_value}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    finally:
        stack.stop()
