"""Canonical content bytes, cached by content hash.

Versions are immutable, so an entry can never be stale; the cache only saves the database
from shipping up to 1 MiB per fetch. It is shared (Redis) so that the drain worker can drop
a drained version's bytes for every web process at once. Redis being away is not an error:
the bytes come from the database, which always holds them.

It talks to Redis through core.redis_client rather than Django's cache API: this is the
hot path. In front of Redis each process keeps a small LRU of the same bytes (bounded in total
size): an entry keyed by content hash can never be wrong, so the per-process copy needs no
invalidation, and a fetch then makes no Redis round trip for the bytes at all (and does not
wait on a hung Redis for them). Redis is not trusted: bytes read from it are served (and kept
in the LRU) only when their SHA-256 is the version's content hash; others are dropped from
Redis and read from the database. Whether a session may be served those bytes is decided
before, on every call, from PostgreSQL."""

import logging
import threading

import redis
from cachetools import LRUCache
from django.conf import settings

from core import breaker, instruments
from core.redis_client import redis_client
from registry import canonical
from registry.models import BundleVersion

logger = logging.getLogger(__name__)

TTL_SECONDS = 7 * 24 * 3600
LOCAL_LIMIT_BYTES = 64 * 1024 * 1024  # per process; one content document is at most 1 MiB


class _LocalBytes:
    """Content bytes by content hash: cachetools' LRU under a lock, bounded in total bytes (a
    document larger than the bound is not kept)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: LRUCache[str, bytes] = LRUCache(maxsize=limit, getsizeof=len)
        self.lock = threading.Lock()

    def get(self, content_hash: str) -> bytes | None:
        with self.lock:
            return self.entries.get(content_hash)

    def put(self, content_hash: str, data: bytes) -> None:
        with self.lock:
            if content_hash in self.entries or len(data) > self.limit:
                return
            self.entries[content_hash] = data  # evicts the least recently used until it fits

    def pop(self, content_hash: str) -> None:
        with self.lock:
            self.entries.pop(content_hash, None)


_local = _LocalBytes(LOCAL_LIMIT_BYTES)


def _client() -> redis.Redis:
    return redis_client(settings.BUNDLE_CACHE_URL)


def _breaker() -> breaker.CircuitBreaker:
    # Through the breaker: with Redis hung, a fetch must not pay a timeout to learn it again.
    return breaker.for_url(settings.BUNDLE_CACHE_URL)


def _key(content_hash: str) -> str:
    return f"registry:content:{content_hash}"


def content_bytes(*, version_id: int, content_hash: str) -> bytes:
    local = _local.get(content_hash)
    if local is not None:
        instruments.cache_lookup(result="local")
        return local
    # Redis is an accelerator: a fetch never fails (or waits long) because of it.
    key = _key(content_hash)
    cached = _breaker().call(lambda: _client().get(key), fallback=None)
    data = cached if isinstance(cached, bytes) else None  # the client does not decode responses
    if data is not None and canonical.content_hash(data) != content_hash:
        # Whoever can write to Redis must not be able to change a pinned prompt: bytes from
        # Redis are served only if they hash to what the version row says (the LRU below
        # holds only bytes checked here or read from the database).
        logger.warning("bundle cache: the bytes in Redis for %s do not match their hash; dropped", content_hash)
        _breaker().call(lambda: _client().delete(key), fallback=None)
        data = None
    instruments.cache_lookup(result="redis" if data is not None else "database")
    if data is None:
        data = bytes(BundleVersion.objects.values_list("canonical", flat=True).get(pk=version_id))
        _breaker().call(lambda: _client().set(key, data, ex=TTL_SECONDS), fallback=None)
    _local.put(content_hash, data)
    return data


def is_cached(content_hash: str) -> bool:
    """In this process's LRU or in Redis."""
    return _local.get(content_hash) is not None or bool(_client().exists(_key(content_hash)))


def drop(content_hash: str) -> None:
    """Drop the bytes of a drained or revoked version. If another bundle has a version with the
    same content, its next fetch simply reloads them from the database. Other processes keep
    their local copy until it ages out of their LRU: harmless, the bytes are still right."""
    _local.pop(content_hash)
    _breaker().call(lambda: _client().delete(_key(content_hash)), fallback=None)
