"""Quieter Celery logs for periodic tasks: at INFO, a worker logs "received" and "succeeded" for
every task and beat logs "Sending due task" for every due entry, so the webhook retry sweep
alone (every 5 s) wrote about 36 lines a minute and pushed everything else out of view.

Those three lines are dropped for the tasks in the beat schedule unless the log level is DEBUG
or LOG_PERIODIC_TASKS is on (the chaos suite counts the sweep's results from them);
every other task keeps them, and a periodic task's failure (logged at ERROR) and whatever the
task itself logs are unaffected."""

import logging
import os
from collections.abc import Iterable
from typing import Any

# The loggers that write those lines: the worker's strategy ("received"), the tracer
# ("succeeded"), and beat ("Sending due task").
NOISY_LOGGERS = ("celery.worker.strategy", "celery.app.trace", "celery.beat")


class PeriodicTaskNoise(logging.Filter):
    def __init__(self, tasks: Iterable[str]) -> None:
        super().__init__()
        self.tasks = frozenset(tasks)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or logging.getLogger().isEnabledFor(logging.DEBUG):
            return True
        args = record.args
        if isinstance(args, dict):  # the worker's lines: a context dict with the task's name
            name = args.get("name")
        elif isinstance(args, tuple) and len(args) == 2:  # beat's: (entry name, task name)
            name = args[1]
        else:
            return True
        return name not in self.tasks


def quiet_periodic_tasks(beat_schedule: dict[str, dict[str, Any]]) -> None:
    """Install the filter (once) on the loggers that write the per-run lines."""
    if os.environ.get("LOG_PERIODIC_TASKS", "").lower() in ("1", "true", "yes", "on"):
        return
    noise = PeriodicTaskNoise(entry["task"] for entry in beat_schedule.values())
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, PeriodicTaskNoise)]:
            logger.removeFilter(old)
        logger.addFilter(noise)
