"""Celery tasks of the skills app, on the lifecycle queue (the default): thin and idempotent."""

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from registry.models import BundleVersion
from registry.parsed_content import content_document
from skills import index_store


@shared_task(name=index_store.SKILL_INDEX_TASK, acks_late=True, max_retries=0)
def skill_index_task(content_hash: str) -> str:
    """Build and share the routing index of the version of this content (skills.index_store);
    a redelivery finds the entry stored and stops."""
    version = BundleVersion.objects.filter(content_hash=content_hash).only("pk", "content_hash").first()
    if version is None:
        return "no version"
    content = content_document(version_id=version.pk, content_hash=content_hash)
    return index_store.build_and_share(content.get("skills") or [], content_hash)


@shared_task(
    name="skills.tasks.skill_index_sweep_task",
    acks_late=True,
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=3,
)
def skill_index_sweep_task() -> dict[str, int]:
    # A build already claimed is not sent again (index_store.request_build), so a redelivery is harmless.
    return index_store.sweep(settings.SKILL_INDEX_SWEEP_MAX)
