"""Send a Celery task by name, from a service, after commit.

Services never import a tasks module (tasks import services), so they send by the task's
registered name. Sending never raises and never waits long on the broker
(CELERY_BROKER_CONNECTION_TIMEOUT, retry=False): every task sent from here has a periodic
sweep behind it, so a request still succeeds while Redis is away and the sweep catches up."""

import logging

from config.celery import app

logger = logging.getLogger(__name__)


def send(task_name: str, *, what: str, **kwargs: object) -> None:
    """Send `task_name` with keyword arguments `kwargs`; `what` names the job in the warning
    logged when the broker cannot be reached."""
    try:
        app.send_task(task_name, kwargs=kwargs, retry=False)
    except Exception:
        logger.warning("could not enqueue %s; the sweep will catch up", what, exc_info=True)
