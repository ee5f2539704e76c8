"""API keys: who calls the REST API, and with which role."""

from django.db import models


class Role(models.TextChoices):
    # Ordered: each role includes the ones before it (ROLE_RANK below).
    AGENT = "agent"
    PUBLISHER = "publisher"
    OPS = "ops"
    ADMIN = "admin"


ROLE_RANK = {Role.AGENT: 0, Role.PUBLISHER: 1, Role.OPS: 2, Role.ADMIN: 3}


class ApiKey(models.Model):
    """An API key. Only the SHA-256 of the secret is stored; `prefix` identifies it in lists.

    A key works while it is neither revoked nor past `expires_at`. `scopes` limits it to
    bundles whose names match one of its patterns (`support-*`); empty means all bundles."""

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=16, choices=Role.choices)
    prefix = models.CharField(max_length=16, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    rotated_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    def as_actor(self):
        from access.actors import Actor

        return Actor.for_key(key_id=self.pk, name=self.name, role=self.role, scopes=self.scopes)
