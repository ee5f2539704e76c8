"""Domain events: `version.published`, `label.moved`, `version.draining`, `version.drained`,
`version.revoked`, `release.applied`, `check.completed`, `approval.recorded`, `change.requested`,
`change.approved`, `change.rejected`, `tool.draining`, `tool.drained`, `session.expired`.

The domain (registry, sessions_app) publishes here and never imports who listens: an app
that delivers events registers a `Subscriber` in its `AppConfig.ready()` (webhooks does, see
webhooks/apps.py), so the import arrows point down into core and not up into webhooks.

Call `emit` inside the transaction of the change it reports: every subscriber records its
deliveries in that same transaction (so a rolled-back change announces nothing and a committed
one is never lost to a broker outage), and one JSON log line (logger `registry.events`) is
written after commit. Fields are ids, names, numbers, hashes and states: never content.
Adding an event: its name in webhooks.models.Event, an `emit` in the service that makes the
change, a line in docs/webhooks.md."""

import json
import logging
from typing import Protocol

from django.db import transaction
from django.utils import timezone

logger = logging.getLogger("registry.events")


class Subscriber(Protocol):
    def subscribed(self, event: str) -> bool:
        """Whether anything wants `event` (lets a high-volume emitter skip the work)."""
        ...

    def deliver(self, *, event: str, data: dict[str, object]) -> None:
        """Record `event` inside the caller's transaction."""
        ...


_subscribers: list[Subscriber] = []


def subscribe(subscriber: Subscriber) -> None:
    """Register `subscriber` (once per process, from an AppConfig.ready())."""
    if subscriber not in _subscribers:
        _subscribers.append(subscriber)


def subscribed(event: str) -> bool:
    return any(s.subscribed(event) for s in _subscribers)


def emit(event: str, **fields: object) -> None:
    record = {"event": event, "at": timezone.now().isoformat(), **fields}
    data = json.loads(json.dumps(fields, default=str))
    for subscriber in _subscribers:
        subscriber.deliver(event=event, data=data)
    transaction.on_commit(lambda: logger.info(json.dumps(record, sort_keys=True, default=str)))
