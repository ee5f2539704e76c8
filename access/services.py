import hashlib
import hmac
import secrets

from django.utils import timezone

from access.models import ApiKey, Role
from registry.errors import InvalidContent

KEY_PREFIX = "pr_"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def api_key_create(*, name: str, role: str) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is not stored and cannot be shown again."""
    if role not in Role.values:
        raise InvalidContent(f"Unknown role {role!r}.", {"role": [f"Choose one of {', '.join(Role.values)}."]})
    if not name.strip():
        raise InvalidContent("A key needs a name.", {"name": ["This field is required."]})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(name=name, role=role, prefix=secret[:10], secret_hash=hash_secret(secret))
    return key, secret


def api_key_authenticate(*, secret: str) -> ApiKey | None:
    """The active key whose secret this is, or None."""
    if not secret.startswith(KEY_PREFIX):
        return None
    digest = hash_secret(secret)
    key = ApiKey.objects.filter(secret_hash=digest, revoked_at__isnull=True).first()
    # The lookup is by the digest already; compare in constant time anyway so that no later
    # change to the lookup can turn this into a timing oracle.
    if key is None or not hmac.compare_digest(key.secret_hash, digest):
        return None
    return key


def api_key_revoke(*, key: ApiKey) -> None:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
