"""Real web server processes for tests: `python -m edge.serve` (granian, config.asgi) on a
free loopback port, against the test database, so that what is tested is what runs."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def current_database_url() -> str:
    """DATABASE_URL of the database this test runs on (pytest-django's test_... database)."""
    s = connection.settings_dict
    host = s["HOST"] or ""
    host = quote(host, safe="") if host.startswith("/") else host
    port = f":{s['PORT']}" if s["PORT"] else ""
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    return f"postgres://{quote(s['USER'] or '', safe='')}{password}@{host}{port}/{s['NAME']}"


@contextmanager
def web_server(
    *, workers: int = 1, env: dict[str, str] | None = None, timeout: float = 60, app: str | None = None
) -> Iterator[str]:
    """Start one server (its own worker processes), yield its base URL, stop it after. `app`:
    another ASGI application than config.asgi's (tests.django_lane_asgi: Django alone)."""
    port = free_port()
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "DATABASE_URL": current_database_url(),
        **(env or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge.serve", "--port", str(port), "--workers", str(workers)]
        + (["--app", app] if app else []),
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
