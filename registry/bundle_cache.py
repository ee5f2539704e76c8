"""Canonical content bytes, cached by content hash.

Versions are immutable, so an entry can never be stale; the cache only saves the database
from shipping up to 1 MiB per fetch. It is shared (Redis) so that the drain worker can drop
a drained version's bytes for every web process at once. Redis being away is not an error:
the bytes come from the database, which always holds them.

It talks to Redis through config.redis_client rather than Django's cache API: this is the
hot path."""

import logging

import redis
from django.conf import settings

from config.redis_client import redis_client
from registry.models import BundleVersion

logger = logging.getLogger(__name__)
TTL_SECONDS = 7 * 24 * 3600


def _client() -> redis.Redis:
    return redis_client(settings.BUNDLE_CACHE_URL)


def _key(content_hash: str) -> str:
    return f"registry:content:{content_hash}"


def content_bytes(*, version_id: int, content_hash: str) -> bytes:
    try:
        data = _client().get(_key(content_hash))
    except redis.RedisError:  # the cache is an accelerator; never fail a fetch because of it
        logger.warning("bundle cache unavailable on get", exc_info=True)
        data = None
    if data is None:
        data = bytes(BundleVersion.objects.values_list("canonical", flat=True).get(pk=version_id))
        try:
            _client().set(_key(content_hash), data, ex=TTL_SECONDS)
        except redis.RedisError:
            logger.warning("bundle cache unavailable on set", exc_info=True)
    return data


def is_cached(content_hash: str) -> bool:
    return bool(_client().exists(_key(content_hash)))


def drop(content_hash: str) -> None:
    """Drop the bytes of a drained or revoked version. If another bundle has a version with the
    same content, its next fetch simply reloads them from the database."""
    try:
        _client().delete(_key(content_hash))
    except redis.RedisError:
        logger.warning("bundle cache unavailable on drop", exc_info=True)
