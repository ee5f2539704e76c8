"""The README's release section, run as written (bash and curl) twice against a live server:
a 10% ramp, its increase and its rollback, an If-Match conflict, and an atomic release of two
bundles with its dry run and its rollback."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.django_db(transaction=True)

SOURCE_LINE = "source .run/demo.env"
API_LINE = "API=http://127.0.0.1:8000/api/v1"
EXPECTED = [
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


def _block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Releasing safely", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return block


@pytest.mark.skipif(not (shutil.which("bash") and shutil.which("curl")), reason="needs bash and curl")
def test_the_readme_release_section_runs_twice(live_server, settings):
    block = _block()
    assert block.count(SOURCE_LINE) == 1 and block.count(API_LINE) == 1
    keys = {
        f"{role.upper()}_KEY": api_key_create(name=f"rel-{role}", role=role, actor=SYSTEM)[1]
        for role in (Role.AGENT, Role.PUBLISHER, Role.OPS, Role.ADMIN)
    }
    exports = "; ".join(f"export {name}='{secret}'" for name, secret in keys.items())
    script = block.replace(SOURCE_LINE, exports).replace(API_LINE, f"API={live_server.url}/api/v1")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_KEY")}
    for run in (1, 2):
        result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and result.stderr == "", (run, result.stderr[-2000:])
        assert [line for line in result.stdout.splitlines() if line] == EXPECTED, (run, result.stdout)
        if run == 1:
            import time

            time.sleep(1.1)  # the block names its bundles by the second
