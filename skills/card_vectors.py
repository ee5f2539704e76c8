"""Card vectors of a configured embeddings endpoint, shared by every process through Redis: a
version's cards are embedded once per cluster, not once per worker (100 cards through a local
multilingual-e5-small cost 6.4 s inside the first route call each worker got for the version).

The key is the model's name and the SHA-256 of the card texts (skills.embedding.cards_key), so
an entry can never be stale: the same texts give the same vectors. Redis is not trusted: each
entry holds an HMAC-SHA256 of its key and vector bytes under a key derived from the Django
SECRET_KEY (an unkeyed digest anyone who can write to Redis recomputes, so forged vectors that
steer routing passed it), and is used only when that matches and the size is that of one vector
per text; otherwise it is deleted and the vectors computed. The key is in the MAC, so an entry
copied under another key does not pass either. Redis being away
costs the embedding, never an error (through core.breaker, like the bundle cache)."""

import hmac
import logging

import numpy as np
import redis
from django.conf import settings
from django.utils.crypto import salted_hmac

from core import breaker
from core.redis_client import redis_client

logger = logging.getLogger(__name__)

TTL_SECONDS = 30 * 24 * 3600
MAX_BYTES = 8 * 1024 * 1024  # larger sets of card vectors are not shared (computed per process)
DIGEST = 32


def _client() -> redis.Redis:
    return redis_client(settings.BUNDLE_CACHE_URL)


def _breaker() -> breaker.CircuitBreaker:
    return breaker.for_url(settings.BUNDLE_CACHE_URL)


def _redis_key(key: str) -> str:
    return f"registry:cardvec:{key}"


def _mac(name: str, body: bytes) -> bytes:
    """HMAC-SHA256 of the entry's Redis key and bytes, keyed by a SECRET_KEY-derived key."""
    return salted_hmac("registry.card_vectors", name.encode() + b"\x00" + body, algorithm="sha256").digest()


class RedisCardCache:
    """skills.embedding.CardCache over the cache's Redis (BUNDLE_CACHE_URL)."""

    def get(self, key: str, rows: int) -> np.ndarray | None:
        name = _redis_key(key)
        cached = _breaker().call(lambda: _client().get(name), fallback=None)
        if not isinstance(cached, bytes):
            return None
        digest, body = cached[:DIGEST], cached[DIGEST:]
        width = len(body) // 4 // rows if rows else 0
        if not hmac.compare_digest(_mac(name, body), digest) or not width or len(body) != rows * width * 4:
            logger.warning("card vectors in Redis for %s do not match their MAC or shape; dropped", key)
            _breaker().call(lambda: _client().delete(name), fallback=None)
            return None
        return np.frombuffer(body, dtype="<f4").reshape(rows, width)

    def put(self, key: str, vectors: np.ndarray) -> None:
        body = np.ascontiguousarray(vectors, dtype="<f4").tobytes()
        if len(body) > MAX_BYTES:
            return
        name = _redis_key(key)
        payload = _mac(name, body) + body
        _breaker().call(lambda: _client().set(name, payload, ex=TTL_SECONDS), fallback=None)
