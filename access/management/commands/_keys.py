"""Shared bits of the key commands: who they act as, and finding keys by prefix or name."""

from django.core.management.base import CommandError
from django.db.models import Q
from django.utils import timezone

from access.actors import Actor
from access.models import ApiKey, Role

# Whoever can run manage.py controls the deployment anyway; the audit log names the command.
CLI = Actor(name="cli:manage.py", role=Role.ADMIN)


def live_keys(ident: str) -> list[ApiKey]:
    """The working keys `ident` names: the one with that prefix (pr_xxxxxxx), else every key
    with that name. A name can hold several: a rotation with a grace period leaves the old
    key working next to its successor until the grace ends."""
    working = ApiKey.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    keys = list(working.filter(prefix=ident).order_by("pk")) or list(working.filter(name=ident).order_by("pk"))
    if not keys:
        raise CommandError(f"No live key with prefix or name {ident!r}.")
    return keys


def replaced_by_rotation(keys: list[ApiKey]) -> list[ApiKey]:
    """Those of `keys` that a rotation has replaced (still working only for their grace period)."""
    replaced = set(ApiKey.objects.filter(rotated_from__in=keys).values_list("rotated_from_id", flat=True))
    return [key for key in keys if key.pk in replaced]


def find_key(ident: str) -> ApiKey:
    """The one current key `ident` names: by prefix, or by name, where a key still in the grace
    period of its rotation does not count (rotating a name rotates its newest key)."""
    keys = live_keys(ident)
    if len(keys) > 1:
        replaced = {key.pk for key in replaced_by_rotation(keys)}
        keys = [key for key in keys if key.pk not in replaced] or keys
    if len(keys) > 1:
        prefixes = ", ".join(key.prefix for key in keys)
        raise CommandError(f"{len(keys)} live keys are named {ident!r} ({prefixes}); give the prefix instead.")
    return keys[0]
