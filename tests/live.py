"""A real registry web server as a separate process on the test database: what the client,
the CLI and the MCP tests talk to. It is started the way `make run` starts it
(`devtools.stack.web_command`), can be stopped and started again on the same port (to test
retries across a restart), and sees what the tests commit (use transactional_db)."""

import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from devtools.stack import free_port, web_command

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    s = connection.settings_dict
    host = quote(s["HOST"], safe="") if s["HOST"].startswith("/") else s["HOST"]
    port = f":{s['PORT']}" if s["PORT"] else ""
    password = f":{s['PASSWORD']}" if s["PASSWORD"] else ""
    return f"postgres://{s['USER']}{password}@{host}{port}/{s['NAME']}"


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
