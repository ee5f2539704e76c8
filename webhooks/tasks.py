from celery import shared_task
from django.db import OperationalError

from webhooks import services


@shared_task(acks_late=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def webhook_deliver_task(*, delivery_id: int) -> str | None:
    # Idempotent: the claim in delivery_attempt lets only one attempt through per due time.
    return services.delivery_attempt(delivery_id=delivery_id)


@shared_task(acks_late=True, max_retries=0)
def webhook_retry_sweep_task() -> int:
    """The backstop and the retry clock: send every due delivery (retries, lost enqueues)."""
    due = services.deliveries_due()
    for delivery_id in due:
        # Fan out: one slow receiver must not hold up the others' retries.
        webhook_deliver_task.delay(delivery_id=delivery_id)
    return len(due)
