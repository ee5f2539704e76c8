"""Celery tasks: thin, take ids, re-read the database, idempotent (so acks_late is safe).

Services send these by name (registry.lifecycle.VERSION_DRAIN_TASK, through core.enqueue) and
never import this module; the names are written out so that moving a function cannot
silently change what the services and the beat schedule send."""

from celery import shared_task
from django.db import OperationalError

from registry import lifecycle
from sessions_app import sweep


@shared_task(
    name=lifecycle.VERSION_DRAIN_TASK,
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def version_drain_task(*, version_id: int) -> bool:
    # Draining a drained (or live) version does nothing, so a redelivery is harmless.
    return lifecycle.version_drain(version_id=version_id)


@shared_task(
    name="sessions_app.tasks.sweep_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def sweep_task() -> dict[str, int] | None:
    return sweep.sessions_sweep()
