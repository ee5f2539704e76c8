"""`make run` supervises its children: a worker, beat or web server that dies is restarted
(and it says so); only SIGINT/SIGTERM to the supervisor stops everything. Run for real: the
whole `python -m devtools.stack run` against the test's PostgreSQL server and Redis."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from devtools.stack import free_port
from devtools.supervisor import Supervisor
from tests.live import database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.worker


def _wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_the_supervisor_restarts_a_child_with_a_growing_backoff_and_stops_all_on_request(tmp_path):
    supervisor = Supervisor()
    crasher = supervisor.add("crasher", [sys.executable, "-c", "import sys; sys.exit(3)"], cwd=tmp_path)
    sleeper = supervisor.add("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    began = time.monotonic()
    supervisor.run(until=lambda: crasher.restarts >= 2 or time.monotonic() - began > 10)
    assert crasher.restarts == 2
    assert [code for _, code in crasher.history[:2]] == [3, 3]
    # 1 s, then 2 s between the restarts.
    assert 2.5 < time.monotonic() - began < 6
    assert sleeper.restarts == 0 and sleeper.proc.poll() is None
    supervisor.stop(grace=5)
    assert sleeper.proc.poll() is not None


@pytest.mark.django_db(transaction=True)
def test_make_run_restarts_a_killed_worker_and_stops_everything_on_sigterm(tmp_path):
    port = free_port()
    database = f"{connection.settings_dict['NAME']}_stack"
    url = database_url().rsplit("/", 1)[0] + f"/{database}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PORT": str(port),
        "STACK_RUN_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": "stack-test-" + "k" * 50,
        "WEB_CONCURRENCY": "1",
    }
    stack = subprocess.Popen(
        [sys.executable, "-m", "devtools.stack", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []

    def pump() -> None:
        assert stack.stdout is not None
        for line in stack.stdout:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()

    def pid_of(name: str) -> int | None:
        found = [int(m.group(1)) for line in lines if (m := re.search(rf"started {name} \(pid (\d+)\)", line))]
        return found[-1] if found else None

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        _wait_for(lambda: pid_of("worker-lifecycle") and healthy(), 120, "the stack up:\n" + "".join(lines[-30:]))
        # Both workers, one per queue.
        _wait_for(lambda: sum(" ready." in line for line in lines) >= 2, 60, "the workers ready")
        assert any(".> lifecycle " in line for line in lines) and any(".> deliveries " in line for line in lines)
        first = pid_of("worker-lifecycle")
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: pid_of("worker-lifecycle") != first, 10, "the worker restarted:\n" + "".join(lines[-30:]))
        assert any(f"worker-lifecycle (pid {first}) killed by signal 9; restarting in 1 s" in line for line in lines)
        assert stack.poll() is None and healthy()  # nothing else stopped
        children = [pid_of(name) for name in ("web", "worker-lifecycle", "worker-deliveries", "beat")]
        stack.send_signal(signal.SIGTERM)
        stack.wait(40)
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait(10)
    assert stack.returncode == 0, "".join(lines[-30:])
    for pid in children:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not healthy()


def test_it_takes_its_children_with_it_when_it_is_killed_with_kill_9(tmp_path):
    # A supervisor killed with SIGKILL runs no clean-up: its children must go by themselves
    # (prctl PR_SET_PDEATHSIG), or they keep the port and the next `make run` is refused.
    code = (
        "import sys, time; from pathlib import Path; from devtools.supervisor import Supervisor\n"
        "s = Supervisor()\n"
        "child = s.add('sleeper', [sys.executable, '-c', 'import time; time.sleep(60)'], cwd=Path('.'))\n"
        "print(child.pid, flush=True)\n"
        "s.run()\n"
    )
    supervisor = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert supervisor.stdout is not None
    child = int(supervisor.stdout.readline())
    os.kill(child, 0)  # running
    supervisor.kill()
    supervisor.wait(10)

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        # An orphan reaped by init (or by a subreaper) may linger a moment as a zombie.
        return Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z")

    _wait_for(gone, 10, f"the child {child} gone after its supervisor's kill -9")


@pytest.mark.django_db(transaction=True)
def test_make_run_starts_again_on_the_same_port_after_the_last_one_was_killed_with_kill_9(tmp_path):
    port = free_port()
    database = f"{connection.settings_dict['NAME']}_stack"
    env = {
        **os.environ,
        "DATABASE_URL": database_url().rsplit("/", 1)[0] + f"/{database}",
        "PORT": str(port),
        "STACK_RUN_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": "stack-test-" + "k" * 50,
        "WEB_CONCURRENCY": "1",
    }

    children: list[int] = []  # every child either stack started, to clean up whatever happens

    def start() -> subprocess.Popen[str]:
        stack = subprocess.Popen(
            [sys.executable, "-m", "devtools.stack", "run"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

        def pump() -> None:
            assert stack.stderr is not None
            for line in stack.stderr:
                if m := re.search(r"started \S+ \(pid (\d+)\)", line):
                    children.append(int(m.group(1)))

        threading.Thread(target=pump, daemon=True).start()
        return stack

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    first = start()
    second: subprocess.Popen[str] | None = None
    try:
        _wait_for(healthy, 120, "the first stack up")
        first.kill()  # the supervisor alone, as `kill -9 <pid in .run/run.lock>` does
        first.wait(10)
        assert str(first.pid) in (tmp_path / "run.lock").read_text()  # left behind, with the dead pid
        _wait_for(lambda: not healthy(), 30, "the first stack's web server gone with it")
        second = start()
        _wait_for(lambda: healthy() or second.poll() is not None, 120, "the second stack up")
        assert second.poll() is None, "the second make run stopped (port taken by the first one's web server?)"
        second.send_signal(signal.SIGTERM)
        second.wait(40)
        assert second.returncode == 0
    finally:
        for stack in (first, second):
            if stack is not None and stack.poll() is None:
                os.killpg(stack.pid, signal.SIGKILL)
                stack.wait(10)
        for pid in children:  # orphans of the kill -9, when the children do not die with it
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
