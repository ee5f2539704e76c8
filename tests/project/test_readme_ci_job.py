"""The README's CI block ("An evaluation gate from CI") as a CI job or a reader runs it: in a git
checkout with its own .venv active, against a live registry. It must publish, report the check,
and leave the checkout as it found it: no file left behind (eval-summary.txt, client/build/) and
the .venv untouched (issue 35: `pip install ./client` replaced the editable client with a copy).
Needs the package index (the block installs the client's dependencies, httpx and cachetools,
into its own venv)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from access.models import Role
from tests.client.test_cli import write_bundle
from tests.conftest import make_api
from tests.live import registry_server  # noqa: F401 (fixture)
from tests.project.test_readme import readme_blocks

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)

EVALS = """import sys
print("case 1: ok")
print("case 2: ok")
print("2/2 passed", file=sys.stdout)
"""


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if "__pycache__" not in p.parts)


def test_the_ci_block_reports_the_check_and_leaves_the_checkout_as_it_found_it(registry_server, tmp_path):  # noqa: F811
    (block,) = [b for b in readme_blocks() if b.marker == "ci-job"]
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "client", checkout / "client", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    shutil.copy(ROOT / ".gitignore", checkout / ".gitignore")
    write_bundle(checkout / "prompts" / "support")
    (checkout / "eval").mkdir()
    (checkout / "eval" / "run_support_evals.py").write_text(EVALS)
    _git(tmp_path, "init", "-q", str(checkout))
    _git(checkout, "add", "-A")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "ci checkout")
    # The reader's (or the job's) own virtualenv in the checkout, active as `source .venv/bin/activate` makes it.
    subprocess.run(["python3", "-m", "venv", str(checkout / ".venv")], check=True)
    venv_before = _tree(checkout / ".venv")
    ops = make_api(Role.OPS, name="ci-job")
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    env = {
        "PATH": f"{checkout / '.venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "VIRTUAL_ENV": str(checkout / ".venv"),
        "TMPDIR": str(temp),
        "REGISTRY_URL": registry_server.url,
        "REGISTRY_API_KEY": ops.secret,
        "CI_COMMIT_TITLE": "support: shorter greeting",
        "CI_JOB_URL": "https://ci.example/jobs/7",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.code],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The checkout as it was: nothing new, changed or ignored (but the .venv), and the .venv as it was.
    assert _git(checkout, "status", "--porcelain", "--ignored") == "!! .venv/\n"
    assert _tree(checkout / ".venv") == venv_before
    assert "2/2 passed" in done.stdout  # the evaluation's output is in the job's log
    checks = ops.get("/api/v1/bundles/support/versions/1/checks/").json()
    reported = checks["results"] if isinstance(checks, dict) and "results" in checks else checks
    assert [(c["name"], c["status"], c["summary"]) for c in reported] == [("evals", "success", "2/2 passed")]
