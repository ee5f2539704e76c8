"""Celery tasks: thin, take ids, re-read the database, idempotent (so acks_late is safe)."""

import logging

from celery import shared_task
from django.db import OperationalError

from sessions_app import services

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=5)
def version_drain_task(*, version_id: int) -> bool:
    # Draining a drained (or live) version does nothing, so a redelivery is harmless.
    return services.version_drain(version_id=version_id)


@shared_task(acks_late=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def sweep_task() -> dict[str, int] | None:
    return services.sessions_sweep()


def enqueue_version_drain(version_id: int) -> None:
    """Ask a worker to check `version_id`; called after commit from request threads.

    Never raises and never waits long on the broker: if Redis is away the request still
    succeeds and the periodic sweep drains the version later."""
    try:
        version_drain_task.apply_async(kwargs={"version_id": version_id}, retry=False)
    except Exception:
        logger.warning("could not enqueue the drain of version %s; the sweep will catch up", version_id, exc_info=True)
