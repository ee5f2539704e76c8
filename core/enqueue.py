"""Send a Celery task by name, from a service, after commit.

Services never import a tasks module (tasks import services), so they send by the task's
registered name. Sending never raises and never waits on the broker longer than one short
timeout (REDIS_REQUEST_TIMEOUT_MS): it goes through the process's Redis circuit breaker
(core.breaker), so while Redis is down or hung a request skips the broker entirely after
the first timeout. Every task sent from here has a periodic sweep behind it, so a request
still succeeds while Redis is away and the sweep catches up.

The Celery app is config.celery's, reached as Celery's current app (it makes itself current
when config/__init__.py creates it, before settings load), so core does not import config."""

import logging
import threading
from typing import Any

from celery import current_app as app
from django.conf import settings

from core import breaker

logger = logging.getLogger(__name__)
_publish_lock = threading.Lock()
_publish_connection: Any = None
_publish_url = ""  # the URL it was made for (as_uri() drops a rediss:// URL's query, for one)


def _connection(url: str) -> Any:
    """This process's broker connection for enqueueing from requests, with the request path's
    short socket timeouts (the worker and beat keep the broker settings' longer ones: they
    wait on the broker by design). Created lazily, after the web server has forked."""
    global _publish_connection, _publish_url
    if _publish_connection is not None and _publish_url != url:
        _reset_connection()
    if _publish_connection is None:
        _publish_url = url
        timeout = settings.REDIS_REQUEST_TIMEOUT_MS / 1000
        _publish_connection = app.connection_for_write(
            url,
            connect_timeout=timeout,
            transport_options={
                "socket_connect_timeout": timeout,
                "socket_timeout": timeout,
                "max_retries": 0,  # one attempt: the breaker, not a retry loop, handles an outage
            },
        )
    return _publish_connection


def _reset_connection() -> None:
    global _publish_connection
    if _publish_connection is not None:
        try:
            _publish_connection.close()
        except Exception:  # closing a broken connection may fail too; it is dropped either way
            pass
        _publish_connection = None


def send(task_name: str, *, what: str, **kwargs: object) -> bool:
    """Send `task_name` with keyword arguments `kwargs`; `what` names the job in the warning
    logged when the broker cannot be reached. True if it was sent."""
    guard = breaker.for_url(settings.CELERY_BROKER_URL)
    probe = guard.state != guard.CLOSED  # allowed while not closed: this call is the one probe
    if not guard.allow():
        return False
    with _publish_lock:  # a kombu connection is not thread-safe; publishing takes microseconds
        if not probe and guard.state != guard.CLOSED:
            # Redis failed another thread while we waited for the lock: do not pay a timeout too
            # (threads queued here would otherwise each pay one, one after the other).
            return False
        try:
            app.send_task(task_name, kwargs=kwargs, retry=False, connection=_connection(settings.CELERY_BROKER_URL))
        except Exception as exc:
            _reset_connection()
            guard.failed(exc)
            logger.warning("could not enqueue %s (%s); the sweep will catch up", what, type(exc).__name__)
            return False
    guard.succeeded()
    return True
