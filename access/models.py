"""API keys: who calls the REST API, and with which role."""

from django.conf import settings
from django.db import models

from access.actors import Actor
from access.roles import ROLE_RANK, Role
from core import limits

__all__ = ["ROLE_RANK", "ApiKey", "Role", "SsoIdentity"]  # Role and ROLE_RANK live in access.roles


class ApiKey(models.Model):
    """An API key. Only the SHA-256 of the secret is stored; `prefix` identifies it in lists.

    A key works while it is neither revoked nor past `expires_at`. `scopes` limits it to
    bundles whose names match one of its patterns (`support-*`); empty means all bundles."""

    name = models.CharField(max_length=limits.API_KEY_NAME_MAX)
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
    # The first key of the rotation chain this key belongs to (null: this key is the first).
    # Sessions belong to the lineage (Session.api_key is its first key), so rotating a key
    # keeps its sessions reachable (access.actors.Actor.owns).
    lineage_id = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    def as_actor(self) -> Actor:
        return Actor.for_key(
            key_id=self.pk, name=self.name, role=self.role, scopes=self.scopes, lineage_id=self.lineage_id
        )


class SsoIdentity(models.Model):
    """The account of a person who signs in through the OpenID provider: their issuer and
    subject (`sub`), which never change, unlike an email address or a user name. An account
    is matched by this link alone, so a provider account can never take over a local one that
    happens to share its name or email (access.services.sso_sign_in)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=limits.SSO_ISSUER_MAX)
    subject = models.CharField(max_length=limits.SSO_SUBJECT_MAX)
    created_at = models.DateTimeField(auto_now_add=True)
    # The roles the provider's claim gave at the last sign-in (what the account's groups were set to).
    roles = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
