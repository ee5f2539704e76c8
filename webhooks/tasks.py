from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from webhooks import services

# Both run on the `deliveries` queue (CELERY_TASK_ROUTES). The time limits are a backstop: the
# attempt itself ends within WEBHOOK_ATTEMPT_DEADLINE (core.transport).
_LIMIT = settings.WEBHOOK_ATTEMPT_DEADLINE


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
    soft_time_limit=_LIMIT + 10,
    time_limit=_LIMIT + 20,
)
def webhook_deliver_task(*, delivery_id: int) -> str | None:
    # Idempotent: the claim in delivery_attempt lets only one attempt through per due time.
    return services.delivery_attempt(delivery_id=delivery_id)


@shared_task(acks_late=True, max_retries=0)
def webhook_retry_sweep_task() -> int:
    """The backstop and the retry clock: queue every due delivery (retries, lost messages),
    each once, within each endpoint's concurrency limit (webhooks.services)."""
    return len(services.deliveries_queue_due())
