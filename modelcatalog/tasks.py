"""Celery tasks of the model catalog: thin and idempotent (so acks_late is safe)."""

from celery import shared_task
from django.db import OperationalError

from modelcatalog import services


@shared_task(
    name="modelcatalog.tasks.model_retirement_sweep_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def model_retirement_sweep_task() -> int:
    # Each notice is claimed by a unique row, so a redelivery or a second beat emits nothing twice.
    return len(services.retirement_notices_send())
