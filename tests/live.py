"""Real registry web servers as separate processes on the test database: the one module every
live-server test starts its servers from.

- `WebServer` / the `registry_server` fixture: started the way `make run` starts it
  (`devtools.stack.web_command`), stoppable and startable again on the same port (to test
  retries across a restart): what the client, the CLI and the MCP tests talk to;
- `web_server(workers=..., env=..., app=...)`: `python -m edge.serve` with N workers or another
  ASGI app (the lanes, the fast lane's batches), for one `with` block;
- `celery_workers(...)`: real `celery worker` processes (`worker_command`), waited for until
  ready, their output lines yielded; `purge_queues()` drops what tests without a worker left;
- `asgi_scope(...)`: an HTTP scope for calling an ASGI application in process.

Both see what the tests commit (use transactional_db)."""

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection

from devtools.stack import free_port, web_command

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """DATABASE_URL of the database this test runs on (pytest-django's test_... database)."""
    s = connection.settings_dict
    host = s["HOST"] or ""
    host = quote(host, safe="") if host.startswith("/") else host
    port = f":{s['PORT']}" if s["PORT"] else ""
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    return f"postgres://{quote(s['USER'] or '', safe='')}{password}@{host}{port}/{s['NAME']}"


class WebServer:
    """One web server process; `url` is the service root."""

    def __init__(self, *, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, wait: float = 60.0) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "WEB_CONCURRENCY": "1",
            **self.extra_env,
        }
        self.proc = subprocess.Popen(
            web_command(str(self.port), access_log=False),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        proc = self.proc
        threading.Thread(target=lambda: self.output.extend(proc.stdout or []), daemon=True).start()
        began = time.monotonic()
        while time.monotonic() - began < wait:
            if proc.poll() is not None:
                pytest.fail("the web server exited:\n" + "".join(self.output[-40:]))
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail("the web server did not answer /healthz:\n" + "".join(self.output[-40:]))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 2)  # its own process group; SIGINT: a quick shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
        self.proc = None
        # Until the port is free again a restart would fail to bind.
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def registry_server(django_db_setup, django_db_blocker) -> Iterator[WebServer]:
    """A web server for the module; tests add data with transactional_db so it sees it."""
    server = WebServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
        "DATABASE_URL": database_url(),
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


QUEUES = ("lifecycle", "deliveries")


def purge_queues() -> None:
    """Drop leftovers from tests without a worker (both queues, and Celery's old default)."""
    from config.celery import app as celery_app

    with celery_app.connection_for_write() as conn:
        for queue in (*QUEUES, "celery"):
            conn.default_channel.queue_purge(queue)


def worker_command(queue: str, *, concurrency: int = 2, name: str = "test") -> list[str]:
    """A `celery worker` consuming one queue, as in production (one worker per queue)."""
    return [
        *(sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info"),
        *("-Q", queue, "-c", str(concurrency), "--without-mingle", "--without-gossip"),
        *("-n", f"{name}-{queue}-{os.getpid()}-{time.monotonic_ns()}@%h"),
    ]


@contextmanager
def celery_workers(*commands: list[str], env: dict[str, str] | None = None) -> Iterator[list[str]]:
    """Start one process per command on the test database, wait until each says it is ready,
    yield their output lines (interleaved), and stop them after."""
    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        **(env or {}),
    }
    lines: list[str] = []
    procs: list[tuple[subprocess.Popen[str], threading.Event]] = []
    for command in commands:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        ready = threading.Event()

        def pump(proc: subprocess.Popen[str] = proc, ready: threading.Event = ready) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if " ready." in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        procs.append((proc, ready))
    try:
        for _, ready in procs:
            if not ready.wait(60):
                pytest.fail("a Celery worker did not start:\n" + "".join(lines[-40:]))
        yield lines
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def asgi_scope(method: str, path: str, headers: dict[str, str], client: str = "127.0.0.1") -> dict[str, Any]:
    """An HTTP scope for `path`, as granian hands it to the ASGI application."""
    return {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("127.0.0.1", 8000),
        "client": (client, 50000),
    }
