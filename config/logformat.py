"""LOG_FORMAT=json: one JSON object per line, for a log pipeline that parses fields.

Each line holds `time` (UTC, ISO 8601 with milliseconds), `level`, `logger` and `message`, and
whatever of these is known where the line was written: `request_id` (audit.context), the
`key_prefix` the request authenticated with (never the secret), `session_id`, `bundle` and
`version` (core.observe), `trace_id` and `span_id` when tracing is on (config.telemetry),
`task` and `task_id` in a Celery worker, and `exception` with the traceback. Messages are the
same as in the plain format, which never holds prompt content or a secret (tests/project/test_no_leaks.py
checks both formats)."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

from celery import current_task

from audit.context import current as request_context
from core import observe


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = request_context.get().request_id
        if request_id:
            line["request_id"] = request_id
        access = getattr(record, "access", None)
        if isinstance(access, dict):  # an access log line (metrics.access): its fields, as given
            line.update(access)
            return json.dumps(line, ensure_ascii=False, default=str)
        notes = observe.current.get()
        if notes is not None:
            if notes.key_prefix:
                line["key_prefix"] = notes.key_prefix
            if notes.session_id:
                line["session_id"] = notes.session_id
                line["bundle"] = notes.bundle
                line["version"] = notes.version
        ids = observe.trace_ids() or (notes.trace_ids if notes is not None else None)
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        task = _current_task()
        if task is not None:
            line["task"], line["task_id"] = task
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _current_task() -> tuple[str, str] | None:
    """(name, id) of the Celery task this thread runs, or None (a thread-local read)."""
    task = current_task._get_current_object()
    if task is None or getattr(task.request, "id", None) is None:
        return None
    return task.name, task.request.id


def use_json(logger: logging.Logger) -> None:
    """Give each of `logger`'s handlers the JSON format (a Celery worker replaces Django's
    logging set-up with its own handlers; config.celery calls this after it did)."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())
