"""The README's walkthrough, run as written: its shell block, twice in a row, with bash and
curl against a live server and a real Celery worker. A reader pastes exactly this, so it must
work a second time against the same server and leave nothing in the checkout."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from tests.test_worker import worker  # noqa: F401  (the fixture: a real Celery worker process)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SOURCE_LINE = "source .run/demo.env"
API_LINE = "API=http://127.0.0.1:8000/api/v1"


def _walkthrough() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return block


def _outputs(stdout: str) -> list[str]:
    """The lines a reader compares with the README's comments: plain words and numbers."""
    return [line for line in stdout.splitlines() if re.fullmatch(r"[a-z0-9 ]+|A unchanged", line)]


def _json_replies(stdout: str) -> list[dict]:
    replies = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            replies.append(value)
    return replies


@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("curl")), reason="needs bash and curl")
def test_the_readme_walkthrough_runs_twice_against_one_server_and_leaves_no_files(live_server, worker):  # noqa: F811
    block = _walkthrough()
    # The two lines that tie the block to `make run`, replaced by this test's server and keys.
    assert block.count(SOURCE_LINE) == 1 and block.count(API_LINE) == 1, "the walkthrough's first lines changed"
    keys = {
        f"{role.upper()}_KEY": api_key_create(name=f"readme-{role}", role=role, actor=SYSTEM)[1]
        for role in (Role.AGENT, Role.PUBLISHER, Role.OPS, Role.ADMIN)
    }
    exports = "; ".join(f"export {name}='{secret}'" for name, secret in keys.items())
    script = block.replace(SOURCE_LINE, exports).replace(API_LINE, f"API={live_server.url}/api/v1")

    before = set(os.listdir(ROOT))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_KEY")}
    for run in (1, 2):
        result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (run, result.stderr[-2000:])
        assert result.stderr == "", (run, result.stderr[-2000:])
        # Exactly what the README's comments promise, in order: A kept its bytes, B got v2, v1
        # drained once A ended, and C (after the rollback) got v1.
        assert _outputs(result.stdout) == ["A unchanged", "2", "draining", "drained", "1"], (run, result.stdout)
        errors = [reply["error"] for reply in _json_replies(result.stdout) if "error" in reply]
        # The one refusal: the first move to v2, as a breaking change; with allow_breaking it passes.
        assert [error["code"] for error in errors] == ["conflict"], (run, errors)
        assert [change["kind"] for change in errors[0]["details"]["changes"]] == ["tool_renamed"], (run, errors)
    assert set(os.listdir(ROOT)) == before, f"the walkthrough left {set(os.listdir(ROOT)) - before} in the checkout"
