"""A worker whose event loop stops answering is restarted (issue 18): the real server
(`python -m edge.serve`, granian) with one worker and a 2 s watchdog, a request that holds the
GIL on the event loop (tests/freeze_app.py), and /healthz timed until a new worker answers.
Without the watchdog (WEB_WATCHDOG_SECONDS=0) the worker stays frozen and the test fails."""

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest

from devtools.stack import free_port
from tests.live import ROOT, database_url

WATCHDOG_SECONDS = 2


def _healthy(url: str, timeout: float = 1) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def _workers(proc: subprocess.Popen) -> set[int]:
    return {child.pid for child in psutil.Process(proc.pid).children(recursive=True)}


@pytest.mark.timeout(120)
def test_a_worker_whose_event_loop_freezes_is_replaced_within_seconds(transactional_db):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "WEB_WATCHDOG_SECONDS": os.environ.get("TEST_WATCHDOG_SECONDS", str(WATCHDOG_SECONDS)),
    }
    command = [sys.executable, "-m", "edge.serve", "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(
        [*command, "--app", "tests.freeze_app:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(proc.stderr or []), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(output[-40:])
            time.sleep(0.2)
        before = _workers(proc)
        frozen_at = time.monotonic()
        threading.Thread(target=_healthy_quietly, args=(f"{url}/__freeze",), daemon=True).start()
        time.sleep(0.5)
        assert not _healthy(url, timeout=0.5), "the freeze did not freeze the worker"
        recovered = None
        while time.monotonic() - frozen_at < 30:
            if _healthy(url, timeout=0.5):
                recovered = time.monotonic() - frozen_at
                break
            time.sleep(0.2)
        log = "".join(output)
        assert recovered is not None, "the frozen worker was never replaced:\n" + log[-3000:]
        # The watchdog fires at 2 s, granian respawns after 1 s, the new worker starts (Django, ...).
        print(f"worker replaced {recovered:.1f} s after the freeze")
        assert recovered < WATCHDOG_SECONDS + 15, recovered
        assert _workers(proc).isdisjoint(before)  # a new process, not the frozen one come back
        assert f"Timeout (0:00:0{WATCHDOG_SECONDS})!" in log and "freeze_app.py" in log, log[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _healthy_quietly(url: str) -> None:
    try:
        urllib.request.urlopen(url, timeout=60).close()
    except OSError:
        pass
