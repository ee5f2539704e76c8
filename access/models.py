"""API keys: who calls the REST API, and with which role."""

from django.db import models


class Role(models.TextChoices):
    # Ordered: each role includes the ones before it (see Role.rank).
    AGENT = "agent"
    PUBLISHER = "publisher"
    OPS = "ops"
    ADMIN = "admin"


ROLE_RANK = {Role.AGENT: 0, Role.PUBLISHER: 1, Role.OPS: 2, Role.ADMIN: 3}


class ApiKey(models.Model):
    """An API key. Only the SHA-256 of the secret is stored; `prefix` identifies it in lists."""

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=16, choices=Role.choices)
    prefix = models.CharField(max_length=16)
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    @property
    def actor(self) -> str:
        """How this key appears in authorship and audit fields."""
        return f"key:{self.name}"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def as_actor(self):
        from access.actors import Actor

        return Actor(name=self.actor, role=self.role, api_key_id=self.pk)
