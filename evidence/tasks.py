"""Celery tasks of the evidence: thin, idempotent (judging twice acts at most once: the guard
row is locked and its state moves on), on the lifecycle queue."""

from celery import shared_task
from django.db import OperationalError

from evidence import rollouts

ROLLOUT_GUARD_TASK = "evidence.tasks.rollout_guard_task"


@shared_task(
    name=ROLLOUT_GUARD_TASK, acks_late=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3
)
def rollout_guard_task() -> int:
    return rollouts.guards_judge()
