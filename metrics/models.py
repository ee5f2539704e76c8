from django.db import models

from registry.models import BundleVersion


class VersionUsage(models.Model):
    """Pinned-bundle fetches per version. Counted in each web process and added here in
    batches (metrics.usage), so the hot path never writes a row per fetch."""

    version = models.OneToOneField(BundleVersion, on_delete=models.PROTECT, primary_key=True, related_name="usage")
    fetches = models.BigIntegerField(default=0)
    last_fetch_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"usage of version {self.version_id}"
