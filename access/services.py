"""API keys: create, authenticate, revoke, rotate. Keys look like `pr_<43 url-safe chars>`
(256 random bits); only the SHA-256 of the secret is stored, so a leaked database leaks no key.
And the accounts of people who sign in through the OpenID provider (sso_sign_in)."""

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.utils import timezone

from access import hooks
from access.actors import Actor
from access.groups import OPS, PROMPT_ENGINEERS
from access.models import ApiKey, Role, SsoIdentity
from access.selectors import KEY_COLUMNS, KEY_WHERE, key_actor, key_row, key_use_due
from audit.services import audit_record
from core.errors import Forbidden, InvalidContent
from core.limits import API_KEY_NAME_MAX, SCOPE_RE

KEY_PREFIX = "pr_"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _validate(*, name: Any, role: Any, scopes: Any, expires_at: Any) -> tuple[str, str, list[str]]:
    # Any: the values as a command line or a form gave them; this is where they are checked.
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip() or len(name) > API_KEY_NAME_MAX:
        errors["name"] = [f"A name of 1 to {API_KEY_NAME_MAX} characters is required."]
    if role not in Role.values:
        errors["role"] = [f"Choose one of {', '.join(Role.values)}."]
    scopes = list(scopes or [])
    bad = [s for s in scopes if not isinstance(s, str) or not SCOPE_RE.fullmatch(s)]
    if bad:
        errors["scopes"] = [f"Not a bundle-name pattern: {s!r} (use a-z 0-9 . _ - and the wildcards * ?)." for s in bad]
    if expires_at is not None and (not isinstance(expires_at, datetime) or expires_at <= timezone.now()):
        errors["expires_at"] = ["Must be a time in the future."]
    if errors:
        raise InvalidContent("The key is not valid; see details.", errors)
    return name, role, scopes


@transaction.atomic
def api_key_create(
    *,
    name: str,
    role: str,
    actor: Actor,
    scopes: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    rotated_from: ApiKey | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is not stored and cannot be shown again."""
    if not actor.has_role(Role.ADMIN):
        raise Forbidden("Managing API keys needs the admin role.")
    name, role, scopes = _validate(name=name, role=role, scopes=scopes, expires_at=expires_at)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        name=name,
        role=role,
        scopes=scopes,
        prefix=secret[:10],
        secret_hash=hash_secret(secret),
        expires_at=expires_at,
        created_by=actor.name,
        rotated_from=rotated_from,
        lineage_id=(rotated_from.lineage_id or rotated_from.pk) if rotated_from else None,
    )
    audit_record(
        actor=actor,
        action="key.rotated" if rotated_from else "key.created",
        target_type="api_key",
        target=f"{key.name} ({key.prefix})",
        data={"key_id": key.pk, "role": role, "scopes": scopes, "rotated_from": rotated_from and rotated_from.pk},
    )
    return key, secret


# Look a key up by its prefix (not secret on its own), then compare the stored hash in
# constant time, so response timing says nothing about how close a guess was
# (access.selectors: KEY_COLUMNS and KEY_WHERE are the one definition of "a working key").
_AUTH_SQL = f"SELECT {KEY_COLUMNS} FROM access_apikey k WHERE {KEY_WHERE}"


def api_key_lookup(secret: str) -> tuple[str, str] | None:
    """(prefix to look up, SHA-256 of the secret), or None when `secret` cannot be a key."""
    if not secret.startswith(KEY_PREFIX) or len(secret) > 200:
        return None
    return secret[:10], hash_secret(secret)


def api_key_match(rows: Sequence[Sequence[Any]], digest: str) -> Actor | None:
    """The Actor of the row (KEY_COLUMNS first) whose hash is `digest`, or None; notes the key
    as used (a write at most every LAST_USED_RESOLUTION)."""
    match = key_row(rows, digest)
    if match is None:
        return None
    now = timezone.now()
    if key_use_due(match, now):
        ApiKey.objects.filter(pk=match[0]).update(last_used_at=now)
    return key_actor(match)


def api_key_authenticate(*, secret: str) -> Actor | None:
    """The Actor of the working key whose secret this is, or None.

    No cache: a revoked or expired key fails on its very next request. Raw SQL because every
    request, the pinned-bundle fetch included, pays for it."""
    lookup = api_key_lookup(secret)
    if lookup is None:
        return None
    prefix, digest = lookup
    with connection.cursor() as cursor:
        cursor.execute(_AUTH_SQL, [prefix])
        rows = cursor.fetchall()
    return api_key_match(rows, digest)


@transaction.atomic
def api_key_revoke(*, key: ApiKey, actor: Actor, reason: str = "") -> ApiKey:
    if not actor.has_role(Role.ADMIN):
        raise Forbidden("Managing API keys needs the admin role.")
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            action="key.revoked",
            target_type="api_key",
            target=f"{key.name} ({key.prefix})",
            reason=reason,
            data={"key_id": key.pk},
        )
    return key


@transaction.atomic
def api_key_rotate(*, key: ApiKey, actor: Actor, grace: timedelta = timedelta(0)) -> tuple[ApiKey, str]:
    """Replace a key with a new one of the same name, role and scopes. The old key stops at
    once, or after `grace` so that deployments can switch over (it then simply expires)."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        raise InvalidContent("A revoked key cannot be rotated.", {"key": ["Revoked."]})
    new_key, secret = api_key_create(
        name=key.name, role=key.role, scopes=key.scopes, actor=actor, expires_at=key.expires_at, rotated_from=key
    )
    if new_key.lineage_id != key.pk:
        hooks.key_rotated(key_id=key.pk, lineage_id=new_key.lineage_id)
    if grace > timedelta(0):
        until = timezone.now() + grace
        if key.expires_at is None or key.expires_at > until:
            key.expires_at = until
            key.save(update_fields=["expires_at"])
    else:
        api_key_revoke(key=key, actor=actor, reason=f"rotated to {new_key.prefix}")
    return new_key, secret


# The groups single sign-on manages: what each role given by the provider's claim makes an
# account a member of (admin is a superuser instead). Other groups are left as they are.
SSO_ROLE_GROUPS: dict[str, str] = {Role.PUBLISHER: PROMPT_ENGINEERS, Role.OPS: OPS}
SSO_ACTOR = Actor(name="sso", role=Role.ADMIN)


class SsoRefused(Exception):
    """A sign-in through the provider that may not go on; the message says why (for the log)."""


@transaction.atomic
def sso_sign_in(
    *, issuer: str, subject: str, username: str, email: str, first_name: str, last_name: str, roles: frozenset[str]
) -> User:
    """The account of the person the provider vouches for (`issuer`, `subject`), created at their
    first sign-in, with its roles set to exactly `roles` (publisher, ops, admin), as the provider's
    claim says now: a role the claim no longer gives is taken away here, also when none is left
    (the caller then refuses the sign-in; the admin reads the groups at every request, so a
    session still open elsewhere loses its access too). Raises SsoRefused for a user name taken
    by an account that is not this identity's (a local account is never taken over), and for a
    first sign-in without any role (no account is created)."""
    identity = (
        SsoIdentity.objects.select_related("user").select_for_update().filter(issuer=issuer, subject=subject).first()
    )
    if identity is None:
        if User.objects.filter(username=username).exists():
            raise SsoRefused(
                f"the user name {username!r} belongs to an account that did not sign in through the provider"
            )
        if not roles:
            # Nothing to create: an account without a role could not use the admin.
            raise SsoRefused(f"{username!r} has no role here (the claim names no group in OIDC_ROLE_MAP)")
        user = User.objects.create_user(username=username, email=email, first_name=first_name, last_name=last_name)
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject, roles=[])
        audit_record(
            actor=SSO_ACTOR, action="user.sso_created", target_type="user", target=username, data={"issuer": issuer}
        )
    user = identity.user
    changed: list[str] = []
    for field, value in (("email", email), ("first_name", first_name), ("last_name", last_name)):
        if getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    admin = Role.ADMIN in roles
    if user.is_superuser != admin or user.is_staff != admin:
        user.is_superuser = user.is_staff = admin
        changed += ["is_superuser", "is_staff"]
    if changed:
        user.save(update_fields=changed)
    wanted = {SSO_ROLE_GROUPS[r] for r in roles if r in SSO_ROLE_GROUPS}
    managed = Group.objects.filter(name__in=SSO_ROLE_GROUPS.values())
    user.groups.remove(*[g for g in managed if g.name not in wanted])
    user.groups.add(*[g for g in managed if g.name in wanted])
    previous = list(identity.roles)
    now = sorted(roles)
    if previous != now:
        identity.roles = now
        identity.save(update_fields=["roles"])
        audit_record(
            actor=SSO_ACTOR,
            action="user.sso_roles",
            target_type="user",
            target=user.username,
            reason="the provider's claim at sign-in",
            data={"roles": now, "previous": previous},
        )
    return user
