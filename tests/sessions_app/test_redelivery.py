"""Drains survive a worker dying mid-task: kill -9 of a pool child (the task goes back to the
queue at once: task_reject_on_worker_lost) and kill -9 of the whole worker (the unacked message
goes back after the short visibility timeout), both with a real worker and broker.

To have a task really in flight when the kill comes, the test holds the version's row lock
from its own connection: the drain blocks on its SELECT ... FOR UPDATE until released."""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.utils import timezone

from registry import lifecycle
from registry.models import BundleVersion
from registry.services import label_move
from sessions_app.models import Session
from sessions_app.services import session_start
from tests.live import ROOT, database_url, purge_queues, worker_command
from tests.sessions_app.test_worker import _wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


class Worker:
    """A `celery worker` in its own process group, so that it can be killed whole."""

    def __init__(self) -> None:
        env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "config.test_settings"}
        # Drains run on the lifecycle queue.
        command = worker_command("lifecycle", concurrency=1, name="redeliver")
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self.ready.wait(60):
            self.kill()
            pytest.fail("the Celery worker did not start:\n" + "".join(self.lines[-40:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if " ready." in line:
                self.ready.set()

    def child_pids(self) -> list[int]:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(pid) for pid in out.stdout.split()]

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    purge_queues()
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


@contextmanager
def row_locked(version: BundleVersion) -> Iterator[None]:
    with psycopg.connect(database_url()) as conn:
        conn.execute("SELECT 1 FROM registry_bundleversion WHERE id = %s FOR UPDATE", [version.pk])
        yield
        conn.rollback()


@contextmanager
def drain_in_flight(bundle, v2, agent, ops) -> Iterator[BundleVersion]:
    """v1 draining, its last session ended, and the drain task running but stuck on our lock."""
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    v1 = BundleVersion.objects.get(pk=session.version_id)
    with row_locked(v1):
        # Ended as session_end ends it, and the drain it asks for sent; not session_end itself,
        # which reads the version's state under a share lock and so would wait for ours.
        Session.objects.filter(pk=session.pk).update(status="ended", ended_at=timezone.now())
        lifecycle.enqueue_version_drain(v1.pk)
        _wait_for(lambda: _blocked_on_lock(v1.pk), 10)
        yield v1


def _state(version: BundleVersion) -> str:
    return BundleVersion.objects.values_list("state", flat=True).get(pk=version.pk)


def _blocked_on_lock(version_id: int) -> bool:
    with psycopg.connect(database_url()) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            ["%registry_bundleversion%FOR UPDATE%"],
        ).fetchone()
    return bool(row and row[0])


def test_a_drain_whose_pool_child_is_killed_runs_again_at_once(workers, bundle, production, v2, agent, ops):
    workers.append(worker := Worker())
    with drain_in_flight(bundle, v2, agent, ops) as v1:
        [child] = worker.child_pids()
        os.kill(child, signal.SIGKILL)
        _wait_for(lambda: any("WorkerLostError" in line or "exited with" in line for line in worker.lines), 10)
        _wait_for(lambda: len(worker.child_pids()) == 1 and child not in worker.child_pids(), 10)
        _wait_for(lambda: _blocked_on_lock(v1.pk), 10)  # redelivered to the new child, stuck again
    took = _wait_for(lambda: _state(v1) == "drained", 5)
    print(f"drained {took:.2f}s after the lock was released")


def test_a_drain_whose_worker_is_killed_runs_within_5_s_of_a_worker_coming_back(
    workers, bundle, production, v2, agent, ops
):
    workers.append(worker := Worker())
    with drain_in_flight(bundle, v2, agent, ops) as v1:
        worker.kill()  # main process and pool child: the message was delivered, never acknowledged
    time.sleep(0.5)
    assert _state(v1) == "draining"  # nothing ran it while no worker was there
    workers.append(Worker())
    took = _wait_for(lambda: _state(v1) == "drained", 5.0)
    print(f"drained {took:.2f}s after a worker came back")
