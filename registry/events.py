"""Domain events. For now a structured log line each (one JSON object); webhooks come later."""

import json
import logging

from django.utils import timezone

logger = logging.getLogger("registry.events")


def emit(event: str, **fields: object) -> None:
    record = {"event": event, "at": timezone.now().isoformat(), **fields}
    logger.info(json.dumps(record, sort_keys=True, default=str))
