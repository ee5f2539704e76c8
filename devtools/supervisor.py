"""A small process supervisor for the development stack (`make run`) and the chaos suite.

Each child runs in its own process group, so a Ctrl-C in the terminal reaches only the
supervisor, which then stops the children in order; a child that dies on its own (a crash,
kill -9, out of memory) is started again after a backoff (1 s, doubling up to 30 s; back to
1 s once it has stayed up for 30 s), and the supervisor says so. Everything stops only on
SIGINT or SIGTERM to the supervisor.

On Linux each child also asks the kernel for SIGTERM when the supervisor dies (prctl
PR_SET_PDEATHSIG): a supervisor killed with kill -9 can run no clean-up, and without this its
web server would keep the port and its workers and beat would keep running, so that the next
`make run` found the port taken although the run lock's pid was gone (issue 35)."""

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
STABLE_AFTER = 30.0  # seconds up after which a child's backoff starts again from BACKOFF_START
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive SIGTERM when its parent dies, or None where
    prctl does not exist (macOS: there a kill -9 of `make run` still leaves its children)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        # The parent may have died between fork() and prctl(): then no signal will come.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def say(message: str) -> None:
    print(f"[supervisor] {message}", file=sys.stderr, flush=True)


@dataclass
class Child:
    name: str
    command: list[str]
    cwd: Path
    env: dict[str, str] | None = None
    stdout: int | None = None  # None: inherit the supervisor's
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_START
    restart_at: float | None = None
    history: list[tuple[float, int | None]] = field(default_factory=list)  # (when, exit code)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdout=self.stdout,
            stderr=subprocess.STDOUT if self.stdout is not None else None,
            start_new_session=True,  # its own process group: signals reach it only from us
            # The death signal is sent when the thread that forked exits: children are started
            # from the supervisor's main thread (run() and add()), which lives as long as it does.
            preexec_fn=_die_with_parent(),
        )
        self.started_at = time.monotonic()
        self.restart_at = None
        say(f"started {self.name} (pid {self.proc.pid})")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class Supervisor:
    def __init__(self) -> None:
        self.children: dict[str, Child] = {}
        self.stopping = False

    def add(self, name: str, command: list[str], *, cwd: Path, env: dict[str, str] | None = None, **kw) -> Child:
        child = Child(name=name, command=command, cwd=cwd, env=env, **kw)
        self.children[name] = child
        child.start()
        return child

    def request_stop(self, *_args: object) -> None:
        self.stopping = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)

    def check(self) -> None:
        """One round: notice children that exited and restart those whose backoff is over."""
        now = time.monotonic()
        for child in self.children.values():
            if child.proc is None:
                continue
            code = child.proc.poll()
            if code is not None and child.restart_at is None:
                if now - child.started_at >= STABLE_AFTER:
                    child.backoff = BACKOFF_START
                child.history.append((now, code))
                child.restart_at = now + child.backoff
                how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
                say(f"{child.name} (pid {child.proc.pid}) {how}; restarting in {child.backoff:.0f} s")
                child.backoff = min(child.backoff * 2, BACKOFF_MAX)
            if child.restart_at is not None and now >= child.restart_at and not self.stopping:
                child.restarts += 1
                child.start()

    def run(self, *, tick: float = 0.2, until: Callable[[], bool] | None = None) -> None:
        """Supervise until asked to stop (a signal, or `until()` turning true)."""
        while not self.stopping and not (until and until()):
            self.check()
            time.sleep(tick)

    def stop(self, *, grace: float = 10.0) -> None:
        """SIGTERM every child's process group, then SIGKILL what is left after `grace` s."""
        self.stopping = True
        for child in reversed(list(self.children.values())):
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self.children.values():
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{child.name} did not stop within {grace:.0f} s; killing it")
                child.signal_group(signal.SIGKILL)
                child.proc.wait(5)
