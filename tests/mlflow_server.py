"""A real MLflow tracking server for tests/registry/test_importers.py, run from its own virtualenv.

MLflow is large (about 850 MB installed) and only this test needs it, so it lives in
`.venv-mlflow` (gitignored), pinned by tests/mlflow-requirements.txt, never in the project's
locked requirements. `make mlflow-venv` creates it; so does `mlflow_python()` on first use,
with the same stamp (a copy of the requirements file), so a changed pin reinstalls it. The
test is skipped, saying why, only when the virtualenv cannot be created (no package index).
"""

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devtools.stack import free_port

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-mlflow"
REQUIREMENTS = ROOT / "tests" / "mlflow-requirements.txt"
STAMP = VENV / ".installed"
PROMPTS_SCRIPT = ROOT / "tests" / "mlflow_prompts.py"
# MLflow reports usage to a remote host unless told not to; a test sends nothing anywhere.
ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def mlflow_python() -> Path:
    """The MLflow virtualenv's python, installed from the pinned requirements if needed."""
    python = VENV / "bin" / "python"
    wanted = REQUIREMENTS.read_text()
    if python.exists() and STAMP.is_file() and STAMP.read_text() == wanted:
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            pytest.skip(f"could not create {VENV.name} ({' '.join(step[-3:])}): {done.stderr.strip()[-500:]}")
    STAMP.write_text(wanted)
    return python


class MlflowServer:
    """`mlflow server` on a free loopback port with a SQLite store in `workdir`."""

    def __init__(self, python: Path, workdir: Path) -> None:
        self.python = python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "mlflow-server.log"
        command = [
            str(python.parent / "mlflow"),
            "server",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--workers=1",  # the default 4 each import MLflow: a minute more to start on 2 cores
            f"--backend-store-uri=sqlite:///{workdir / 'mlflow.db'}",
            f"--default-artifact-root={workdir / 'artifacts'}",
        ]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=workdir,
                env={**os.environ, **ENV},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, timeout: float = 300.0) -> None:
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        pytest.fail(f"mlflow server did not answer /health in {timeout:.0f}s:\n{self.log.read_text()[-3000:]}")

    def write_prompts(self, phase: str) -> None:
        """Run tests/mlflow_prompts.py `phase` against this server with MLflow's Python API."""
        done = subprocess.run(
            [str(self.python), str(PROMPTS_SCRIPT), self.url, phase],
            capture_output=True,
            text=True,
            env={**os.environ, **ENV},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
