"""`make run` in one checkout: a second start is refused before it touches anything (a lock in
.run/ naming the first one's pid and port), as is a port another program holds; and the
periodic tasks' per-run log lines stay out of the way at INFO. (The stack itself, its restart
keeping the demo keys and password, and the closing banner: tests/project/test_readme.py.)"""

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import beat
from celery.app import trace
from django.conf import settings

from config.tasklog import NOISY_LOGGERS, quiet_periodic_tasks
from devtools import stack

ROOT = Path(__file__).resolve().parents[2]


def _make_run(run_dir: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STACK_RUN_DIR": str(run_dir), "PORT": str(port)}
    return subprocess.run(
        [sys.executable, "-m", "devtools.stack", "run", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_make_run_in_the_checkout_is_refused_with_the_first_ones_pid_and_port(tmp_path, monkeypatch):
    monkeypatch.setattr(stack, "RUN_DIR", tmp_path)
    held = stack.hold_run_lock(8765)
    try:
        began = time.monotonic()
        second = _make_run(tmp_path, stack.free_port())
    finally:
        held.close()
    assert second.returncode == 1
    assert f"already running in this checkout (pid {os.getpid()}, port 8765)" in second.stderr
    assert time.monotonic() - began < 20
    # Refused before anything started: no database, no Redis, no keys.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.lock"]


def test_the_lock_goes_with_its_holder_even_after_kill_9(tmp_path, monkeypatch):
    monkeypatch.setattr(stack, "RUN_DIR", tmp_path)
    code = "import time; from devtools import stack; lock = stack.hold_run_lock(8766); print('held', flush=True)"
    code += "; time.sleep(60)"
    env = {**os.environ, "STACK_RUN_DIR": str(tmp_path)}
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(stack.AlreadyRunning, match=f"pid {holder.pid}, port 8766"):
            stack.hold_run_lock(8000)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    stack.hold_run_lock(8000).close()  # a stale run.lock never blocks a start


def test_a_port_another_program_listens_on_is_refused_clearly(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        refused = _make_run(tmp_path, port)
    assert refused.returncode == 1
    assert f"port {port} is already in use by another program" in refused.stderr
    assert f"PORT={port + 1} make run" in refused.stderr
    assert not (tmp_path / "pgdata").exists() and not (tmp_path / "demo.env").exists()


def test_a_port_that_is_not_a_number_is_refused(tmp_path):
    refused = _make_run(tmp_path, 0)
    assert refused.returncode == 1 and "PORT must be a TCP port number" in refused.stderr


@pytest.fixture
def quiet_loggers():
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [list(logger.filters) for logger in loggers]
    quiet_periodic_tasks(settings.CELERY_BEAT_SCHEDULE)
    quiet_periodic_tasks(settings.CELERY_BEAT_SCHEDULE)  # installing twice keeps one filter
    yield
    for logger, filters in zip(loggers, before, strict=True):
        logger.filters[:] = filters


def test_periodic_tasks_per_run_lines_are_dropped_at_info_and_kept_at_debug(quiet_loggers, caplog):
    from celery.worker import strategy

    sweep = settings.CELERY_BEAT_SCHEDULE["webhooks-retry-sweep"]["task"]
    for name in NOISY_LOGGERS:
        assert sum(type(f).__name__ == "PeriodicTaskNoise" for f in logging.getLogger(name).filters) == 1

    def emit(name: str) -> None:
        context = {"id": "1", "name": name, "args": "()", "kwargs": "{}", "eta": None}
        strategy.logger.info(trace.LOG_RECEIVED, context)
        trace.info(trace.LOG_SUCCESS, {**context, "return_value": None, "runtime": 0.001})
        beat.info("Scheduler: Sending due task %s (%s)", "entry", name)

    caplog.set_level(logging.INFO)
    emit(sweep)
    logging.getLogger("celery.app.trace").error("Task %(name)s[%(id)s] raised", {"name": sweep, "id": "1"})
    emit("registry.tasks.something_else")
    messages = [record.getMessage() for record in caplog.records]
    assert not any("succeeded" in m and sweep in m for m in messages)
    assert not any("received" in m and sweep in m for m in messages)
    assert not any("Sending due task" in m and sweep in m for m in messages)
    assert any("raised" in m and sweep in m for m in messages), "failures are still logged"
    assert sum("registry.tasks.something_else" in m for m in messages) == 3

    caplog.clear()
    caplog.set_level(logging.DEBUG)
    emit(sweep)
    assert sum(sweep in record.getMessage() for record in caplog.records) == 3


def test_log_periodic_tasks_keeps_the_per_run_lines(monkeypatch):
    # The chaos suite's two-beats scenario counts the sweep's results from these lines.
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [list(logger.filters) for logger in loggers]
    for logger in loggers:
        logger.filters[:] = [f for f in logger.filters if type(f).__name__ != "PeriodicTaskNoise"]
    monkeypatch.setenv("LOG_PERIODIC_TASKS", "1")
    try:
        quiet_periodic_tasks(settings.CELERY_BEAT_SCHEDULE)
        assert not any(type(f).__name__ == "PeriodicTaskNoise" for lg in loggers for f in lg.filters)
    finally:
        for logger, filters in zip(loggers, before, strict=True):
            logger.filters[:] = filters
