"""The daily prune (beat: retention-prune), a lifecycle task like the session sweep."""

from typing import Any

from celery import shared_task
from django.db import OperationalError

from retention import services


@shared_task(
    name="retention.tasks.prune_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def prune_task() -> dict[str, Any]:
    # Idempotent: a second run finds nothing older than the cutoffs left to delete.
    results = services.prune()
    return {r.table: {"rows": r.rows, "batch_max_ms": round(max(r.batch_ms, default=0.0), 1)} for r in results}
