"""Domain events: `version.published`, `label.moved`, `version.draining`, `version.drained`,
`version.revoked`, `release.applied`, `session.expired`.

Call `emit` inside the transaction of the change it reports: it queues a webhook delivery for
every endpoint subscribed to the event in that same transaction (so a rolled-back change
announces nothing and a committed one is never lost to a broker outage) and writes one JSON
log line after commit. Fields are ids, names, numbers, hashes and states: never content."""

import json
import logging

from django.db import transaction
from django.utils import timezone

from webhooks.services import event_emit

logger = logging.getLogger("registry.events")


def emit(event: str, **fields: object) -> None:
    record = {"event": event, "at": timezone.now().isoformat(), **fields}
    event_emit(event=event, data=json.loads(json.dumps(fields, default=str)))
    transaction.on_commit(lambda: logger.info(json.dumps(record, sort_keys=True, default=str)))
