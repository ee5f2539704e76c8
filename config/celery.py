import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, worker_process_init

from config import telemetry
from config.tasklog import quiet_periodic_tasks

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("registry")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _quiet_periodic_tasks(logger: logging.Logger, **_kwargs: object) -> None:
    # After Celery has set its logging up (worker and beat alike): see config.tasklog.
    quiet_periodic_tasks(app.conf.beat_schedule)
    _json_logs(logger)


def _task_logger(logger: logging.Logger, **_kwargs: object) -> None:
    _json_logs(logger)


def _json_logs(logger: logging.Logger) -> None:
    """Celery's worker and beat replace Django's log handlers with their own: LOG_FORMAT=json
    gives those the JSON format too (config.logformat; the task's name and id on each line)."""
    from django.conf import settings

    if settings.LOG_FORMAT == "json":
        from config.logformat import use_json

        use_json(logger)


def _traces(**_kwargs: object) -> None:
    # In each pool process, after the fork (the batch span processor's export thread and the
    # instrumented connections belong to the process that uses them): config.telemetry.
    telemetry.setup()


# Connected by a call rather than as decorators: Celery ships no types, and its untyped
# decorator would leave the handlers untyped too.
after_setup_logger.connect(_quiet_periodic_tasks)
after_setup_task_logger.connect(_task_logger)
worker_process_init.connect(_traces)
