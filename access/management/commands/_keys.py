"""Shared bits of the key commands: who they act as, and finding a key by prefix or name."""

from django.core.management.base import CommandError
from django.db.models import Q
from django.utils import timezone

from access.actors import Actor
from access.models import ApiKey, Role

# Whoever can run manage.py controls the deployment anyway; the audit log names the command.
CLI = Actor(name="cli:manage.py", role=Role.ADMIN)


def find_key(ident: str) -> ApiKey:
    """A live key by its prefix (pr_xxxxxxx) or its unique name."""
    working = ApiKey.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    keys = list(working.filter(prefix=ident)) or list(working.filter(name=ident))
    if not keys:
        raise CommandError(f"No live key with prefix or name {ident!r}.")
    if len(keys) > 1:
        raise CommandError(f"{len(keys)} live keys are named {ident!r}; give the prefix instead.")
    return keys[0]
