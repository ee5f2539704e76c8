"""The event-loop watchdog of a web worker: a worker whose event loop stops answering exits, so
that granian (`--respawn-failed-workers`, edge.serve) starts a fresh one.

Why: everything a worker serves goes through its event loop (the fast lane, MCP, the Django
lane's hand-off to its threads). One call that holds the GIL in C code (a backtracking regex
was one, issue 18) or a loop blocked by a bug stops the whole worker, and granian has no
health check of its own: it restarts a worker only when the process exits. So the loop must
prove it is alive, and something that does not need the loop (nor the GIL) must act when it
does not.

How: `faulthandler.dump_traceback_later(seconds, exit=True)` arms a timer in a C thread of
CPython's that needs no GIL; a task on the loop re-arms it every `seconds / 5`. If the loop
does not come round within `seconds`, that thread writes every thread's Python traceback to
stderr (under a line `Timeout (0:00:10)!`: the frozen frame is in it) and calls _exit(1); granian
logs the worker's unexpected exit and starts another. The re-arming task also logs a warning
when it ran late by more than a fifth of the budget (a stall that recovered by itself).

One timer per process: faulthandler has a single one, and nothing else in the web worker uses
it (pytest's `faulthandler_timeout` would, which is why tests start no watchdog unless asked)."""

import asyncio
import faulthandler
import logging
import sys
import time

logger = logging.getLogger(__name__)


class LoopWatchdog:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Arm the timer and start re-arming it from the running loop (no-op when seconds <= 0)."""
        if self.seconds <= 0:
            return
        faulthandler.dump_traceback_later(self.seconds, exit=True, file=sys.stderr)
        self.task = asyncio.get_running_loop().create_task(self._beat(), name="loop-watchdog")
        logger.info("event-loop watchdog: a worker whose loop stalls %g s exits and is respawned", self.seconds)

    async def _beat(self) -> None:
        interval = self.seconds / 5
        while True:
            began = time.monotonic()
            await asyncio.sleep(interval)
            late = time.monotonic() - began - interval
            faulthandler.dump_traceback_later(self.seconds, exit=True, file=sys.stderr)
            if late > interval:
                logger.warning("event loop stalled for %.1f s (the watchdog exits at %g s)", late, self.seconds)

    async def stop(self) -> None:
        if self.task is None:
            return
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        self.task = None
        faulthandler.cancel_dump_traceback_later()
