"""`manage.py` in a checkout where `make run` has run: the commands docs/operations.md shows
(prune, export_bundles, import_bundles, the key commands) work as pasted in a reader's shell,
without sourcing .run/services.env first (issue 35). Run for real, as a subprocess with a
reader's environment: no DJANGO_* variables, no DATABASE_URL, no REDIS_URL."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.live import database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def _reader_env(run_dir: Path, **extra: str) -> dict[str, str]:
    kept = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    return {**kept, "STACK_RUN_DIR": str(run_dir), **extra}


def _manage(run_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_reader_env(run_dir, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """What `make run` leaves in .run/: services.env, as devtools/stack.py writes it."""
    (tmp_path / "services.env").write_text(
        f"export DATABASE_URL='{database_url()}'\n"
        f"export REDIS_URL='{settings.REDIS_URL}'\n"
        f"export DJANGO_SECRET_KEY='{'s' * 50}'\n"
    )
    return tmp_path


def test_it_runs_the_operations_commands_with_make_runs_services_env_and_nothing_sourced(run_dir, tmp_path, v1):
    prune = _manage(run_dir, "prune", "--dry-run")
    assert prune.returncode == 0, prune.stderr
    assert "audit_auditevent" in prune.stdout
    exported = _manage(run_dir, "export_bundles", str(tmp_path / "bundles"))
    assert exported.returncode == 0, exported.stderr
    imported = _manage(run_dir, "import_bundles", str(tmp_path / "bundles"))
    assert imported.returncode == 0, imported.stderr
    keys = _manage(run_dir, "list_api_keys")
    assert keys.returncode == 0, keys.stderr


def test_a_variable_the_environment_sets_wins_over_services_env(run_dir):
    (run_dir / "services.env").write_text(
        run_dir.joinpath("services.env").read_text().replace(database_url(), "postgres://nobody@127.0.0.1:9/none")
    )
    refused = _manage(run_dir, "prune", "--dry-run")
    assert refused.returncode != 0  # the file's (wrong) database was used
    prune = _manage(run_dir, "prune", "--dry-run", DATABASE_URL=database_url())
    assert prune.returncode == 0, prune.stderr


def test_without_services_env_it_still_names_the_missing_variable(tmp_path):
    missing = _manage(tmp_path, "prune", "--dry-run")
    assert missing.returncode != 0
    assert "Set the environment variable" in missing.stderr
