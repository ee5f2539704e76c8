import os

from celery import Celery
from celery.signals import after_setup_logger

from config.tasklog import quiet_periodic_tasks

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("registry")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
def _quiet_periodic_tasks(**_kwargs: object) -> None:
    # After Celery has set its logging up (worker and beat alike): see config.tasklog.
    quiet_periodic_tasks(app.conf.beat_schedule)
