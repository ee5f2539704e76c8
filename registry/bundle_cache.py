"""Canonical content bytes, cached by content hash.

Versions are immutable, so an entry can never be stale; the cache only saves the database
from shipping up to 1 MiB per fetch. It is shared (Redis) so that the drain worker can drop
a drained version's bytes for every web process at once. Redis being away is not an error:
the bytes come from the database, which always holds them."""

import logging

from django.core.cache import cache

from registry.models import BundleVersion

logger = logging.getLogger(__name__)
TTL_SECONDS = 7 * 24 * 3600


def _key(content_hash: str) -> str:
    return f"content:{content_hash}"


def content_bytes(*, version_id: int, content_hash: str) -> bytes:
    try:
        data = cache.get(_key(content_hash))
    except Exception:  # the cache is an accelerator; never fail a fetch because of it
        logger.warning("bundle cache unavailable on get", exc_info=True)
        data = None
    if data is None:
        data = bytes(BundleVersion.objects.values_list("canonical", flat=True).get(pk=version_id))
        try:
            cache.set(_key(content_hash), data, timeout=TTL_SECONDS)
        except Exception:
            logger.warning("bundle cache unavailable on set", exc_info=True)
    return data


def is_cached(content_hash: str) -> bool:
    return cache.get(_key(content_hash)) is not None


def drop(content_hash: str) -> None:
    try:
        cache.delete(_key(content_hash))
    except Exception:
        logger.warning("bundle cache unavailable on drop", exc_info=True)
