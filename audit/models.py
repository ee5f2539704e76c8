"""The audit log: one append-only row per state change (a trigger refuses UPDATE and DELETE).

It records who did what to which object and why, with hashes and version numbers, and never
prompt or tool content nor any secret."""

from django.db import models


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=200, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=32)
    target = models.CharField(max_length=300, db_index=True)
    reason = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True, default="")
    client_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
