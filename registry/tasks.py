"""Celery tasks of the registry: thin, idempotent (so acks_late is safe), on the lifecycle queue."""

from celery import shared_task
from django.db import OperationalError

from registry import changes, mcp_drift


@shared_task(
    name="registry.tasks.change_expire_sweep_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def change_expire_sweep_task() -> int:
    # Marking expired changes expired twice changes nothing, so a redelivery is harmless.
    return changes.change_expire_sweep()


@shared_task(
    name="registry.tasks.mcp_drift_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def mcp_drift_task() -> dict[str, int]:
    # A drift recorded once is not announced again, so a redelivery is harmless.
    report = mcp_drift.mcp_drift_check()
    return {"checked": report.checked, "new": report.new, "resolved": report.resolved}
