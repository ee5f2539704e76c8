"""Webhook signing secrets at rest: encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from the
`cryptography` package) under keys from the environment (WEBHOOK_SECRET_KEYS), through
MultiFernet so that the encryption key itself can be rotated: the first key encrypts, every
listed key decrypts, and `reseal` re-encrypts a token under the first. Someone who reads the
database (a backup, a replica, a leaked dump) gets tokens, not secrets."""

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def derived_key(secret_key: str) -> str:
    """The key used when WEBHOOK_SECRET_KEYS is unset: HKDF-SHA256 of DJANGO_SECRET_KEY."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"prompt-registry webhook secrets").derive(
        secret_key.encode()
    )
    return base64.urlsafe_b64encode(raw).decode()


@functools.lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError:
        raise ImproperlyConfigured(
            "WEBHOOK_SECRET_KEYS: each key must be 32 url-safe base64-encoded bytes (Fernet.generate_key())."
        ) from None


def _keys() -> MultiFernet:
    keys = tuple(settings.WEBHOOK_SECRET_KEYS) or (derived_key(settings.SECRET_KEY),)
    return _fernet(keys)


def seal(secret: str) -> str:
    return _keys().encrypt(secret.encode()).decode()


def unseal(token: str) -> str:
    """The secret in `token`; raises ImproperlyConfigured when no configured key opens it (the
    key it was sealed with was removed from WEBHOOK_SECRET_KEYS too early)."""
    try:
        return _keys().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ImproperlyConfigured(
            "A webhook secret was sealed with a key WEBHOOK_SECRET_KEYS no longer lists."
        ) from None


def reseal(token: str) -> str:
    """`token` re-encrypted under the first key (unchanged if it already is)."""
    return _keys().rotate(token.encode()).decode()
