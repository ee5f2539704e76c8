"""Skill routing indexes built off the request path (issue 36). A version whose cards cost more
than SKILL_INDEX_INLINE_COST to index (registry.skills_content.index_build_cost) is indexed by
the worker (the lifecycle queue; sent after its publish commits, and again by a web process that
finds no index, deduplicated by a Redis SET NX), which stores the index in Redis under the
content hash; a web process loads it (0.1 s of CPU for 440 cards of 400 Chinese characters)
instead of building it (3 to 5 s), and until it is there routes by keywords alone
(skills.keyword_router), saying so in the answer.

What is stored is data, never code or pickle: the postings (words and lengths as JSON, card
numbers as int32, weights as float64, exactly as the build made them), each card's length, and
the offline models' card vectors (float32). The keyword patterns, triggers (RE2) and IDF are
derived from them and the cards in process. Redis is not trusted (as skills.card_vectors): an
entry carries an HMAC-SHA256 of its key and bytes under a key derived from SECRET_KEY, and one
that does not match, or whose shapes do not fit the version's cards, is deleted and built
again. A configured embeddings endpoint's card vectors are not in the entry: they come through
skills.card_vectors at the first turn."""

import gc
import hmac
import logging
import math
import secrets
import struct
from typing import Any

import numpy as np
import orjson
import redis
from django.conf import settings
from django.utils.crypto import salted_hmac

from core import breaker, enqueue
from core.redis_client import redis_client
from core.text import warm_up
from registry.parsed_content import content_document
from registry.skills_content import SKILL_INDEX_TASK, index_build_cost
from skills import selectors
from skills.embedding import Endpoint
from skills.keyword_router import KeywordIndex, keyword_index
from skills.params import DEFAULT
from skills.router import Index, _Card, _keyword_table, _Phrase, _triggers, index_for, index_loaded
from skills.semantic import SemanticIndex, card_raw_texts

__all__ = ["SKILL_INDEX_TASK", "build_and_share", "load", "request_build", "routing_index", "sweep"]

logger = logging.getLogger(__name__)

FORMAT = 1  # in the key: an entry of another layout is never read
TTL_SECONDS = 30 * 24 * 3600
CLAIM_SECONDS = 300  # one build request per version per 5 minutes, whoever asks
MAX_BYTES = 64 * 1024 * 1024
DIGEST = 32


def _client() -> redis.Redis:
    return redis_client(settings.BUNDLE_CACHE_URL)


def _breaker() -> breaker.CircuitBreaker:
    return breaker.for_url(settings.BUNDLE_CACHE_URL)


def redis_key(content_hash: str) -> str:
    return f"registry:skillindex:{FORMAT}:{content_hash}"


def _mac(name: str, body: bytes) -> bytes:
    return salted_hmac("registry.skill_index", name.encode() + b"\x00" + body, algorithm="sha256").digest()


def _matrix(matrix: Any) -> tuple[list[int] | None, bytes]:
    if matrix is None:
        return None, b""
    array = np.ascontiguousarray(matrix, dtype="<f4")
    return list(array.shape), array.tobytes()


def dump(index: Index) -> bytes:
    """The entry's bytes: a JSON header (the postings' words and lengths, each card's length, the
    vectors' shapes), then the postings' card numbers (int32) and weights (float64, as built),
    then the offline models' card vectors (float32)."""
    semantic = index.semantic
    local_shape, local = _matrix(semantic.local if semantic else None)
    pieces_shape, pieces = _matrix(semantic.pieces if semantic else None)
    postings = index.postings
    header = orjson.dumps(
        {
            "words": list(postings),
            "counts": [len(p) for p in postings.values()],
            "lengths": [card.length for card in index.cards],
            "local": local_shape,
            "pieces": pieces_shape,
        }
    )
    numbers = np.fromiter((i for p in postings.values() for i, _ in p), dtype="<i4")
    weights = np.fromiter((w for p in postings.values() for _, w in p), dtype="<f8")
    return struct.pack(">I", len(header)) + header + numbers.tobytes() + weights.tobytes() + local + pieces


def _take(body: bytes, at: int, shape: Any, dtype: str = "<f4") -> tuple[Any, int]:
    if shape is None:
        return None, at
    shape = [int(n) for n in shape]
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if any(n < 0 for n in shape) or at + size > len(body):
        raise ValueError("an array past the entry")
    return np.frombuffer(body[at : at + size], dtype=dtype).reshape(shape), at + size


def _postings(words: list[str], counts: Any, numbers: Any, weights: Any) -> dict[str, list[tuple[int, float]]]:
    # Some hundred thousand small tuples: the cyclic collector would walk the young ones again
    # and again while they are made (half the time); none of them can be in a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        pairs = list(zip(numbers.tolist(), weights.tolist(), strict=True))
        postings: dict[str, list[tuple[int, float]]] = {}
        start = 0
        for word, end in zip(words, np.cumsum(counts).tolist(), strict=True):
            postings[word] = pairs[start:end]
            start = end
    finally:
        if enabled:
            gc.enable()
    return postings


def _semantic(skills: list[dict[str, Any]], local: Any, pieces: Any, embedder: Any) -> SemanticIndex:
    semantic = SemanticIndex.__new__(SemanticIndex)
    semantic.params = DEFAULT
    semantic.blend = min(max(DEFAULT.piece_blend, 0.0), 1.0)
    semantic.local, semantic.pieces = local, pieces
    semantic.raw_per_card = [card_raw_texts(skill, DEFAULT) for skill in skills]
    semantic.remote = embedder if isinstance(embedder, Endpoint) else None
    semantic.remote_matrix = None
    return semantic


def _read(cards: int, body: bytes) -> tuple[list[float], dict[str, list[tuple[int, float]]], Any, Any]:
    """The lengths, postings and card vectors of an entry, checked against the number of cards."""
    (size,) = struct.unpack(">I", body[:4])
    header = orjson.loads(body[4 : 4 + size])
    words, counts, lengths = header["words"], np.asarray(header["counts"], dtype=np.int64), header["lengths"]
    if len(lengths) != cards or len(counts) != len(words) or (counts < 1).any():
        raise ValueError("postings or lengths do not fit the cards")
    total = int(counts.sum())
    numbers, at = _take(body, 4 + size, [total], "<i4")
    weights, at = _take(body, at, [total], "<f8")
    local, at = _take(body, at, header["local"])
    pieces, at = _take(body, at, header["pieces"])
    if at != len(body) or any(m is not None and m.shape[0] != cards for m in (local, pieces)):
        raise ValueError("vectors do not fit the cards")
    if total and (int(numbers.min()) < 0 or int(numbers.max()) >= cards):
        raise ValueError("a posting names no card")
    if DEFAULT.semantic and cards and (DEFAULT.piece_blend < 1.0) != (local is not None):
        raise ValueError("vectors of another model layout")
    return lengths, _postings(words, counts, numbers, weights), local, pieces


def restore(skills: list[dict[str, Any]], body: bytes, embedder: Any = None) -> Index:
    """The index `dump` stored, for these cards (DEFAULT parameters); ValueError when the bytes
    do not fit them. What the build derives from the term frequencies (the postings, IDF and
    lengths) is read, not recomputed, so it routes exactly as the index built in process."""
    lengths, postings, local, pieces = _read(len(skills), body)
    index = Index.__new__(Index)
    index.params = DEFAULT
    budget = [DEFAULT.max_trigger_program_total]
    index.cards, index.resident = [], []
    for skill, length in zip(skills, lengths, strict=True):  # in the build's order
        if skill["level"] == "L1":
            index.resident.append(skill["name"])
        triggers, skipped = _triggers(skill, budget)
        index.cards.append(
            _Card(
                name=skill["name"],
                category=skill["category"],
                level=skill["level"],
                group=skill.get("exclusive_group"),
                keywords=[_Phrase(k.lower().strip()) for k in skill["keywords"] if k.strip()],
                triggers=triggers,
                skipped_triggers=skipped,
                tf={},  # only the build reads it (into the postings)
                length=float(length),
            )
        )
    n = len(index.cards) or 1
    index.avg_length = sum(c.length for c in index.cards) / n or 1.0
    index.postings = postings
    # A word's document frequency is its postings' length; in the build's order.
    index.idf = {w: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for w, p in index.postings.items()}
    index.by_name = {c.name: c for c in index.cards}
    index.phrases, index.phrase_cards = _keyword_table(index.cards)
    index.spaced_names = [(c.name, c.name.replace("_", " ")) for c in index.cards]
    index.semantic = _semantic(skills, local, pieces, embedder) if DEFAULT.semantic and skills else None
    index.prepare()
    return index


def load(content_hash: str, skills: list[dict[str, Any]], embedder: Any = None) -> Index | None:
    """The index the worker stored for this content, or None (absent, Redis away, or refused:
    a MAC or a shape that does not match, then deleted so that it is built again)."""
    name = redis_key(content_hash)
    cached = _breaker().call(lambda: _client().get(name), fallback=None)
    if not isinstance(cached, bytes):
        return None
    digest, body = cached[:DIGEST], cached[DIGEST:]
    try:
        if not hmac.compare_digest(_mac(name, body), digest):
            raise ValueError("MAC does not match")
        return restore(skills, body, embedder)
    except (ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
        logger.warning("skill index in Redis for %s refused (%s); dropped, to be built again", content_hash, exc)
        _breaker().call(lambda: _client().delete(name), fallback=None)
        return None


def store(content_hash: str, index: Index) -> bool:
    body = dump(index)
    if len(body) > MAX_BYTES:
        logger.warning("skill index of %s is %d bytes: not shared", content_hash, len(body))
        return False
    name = redis_key(content_hash)
    payload = _mac(name, body) + body
    return bool(_breaker().call(lambda: bool(_client().set(name, payload, ex=TTL_SECONDS)), fallback=False))


def _claim_key(content_hash: str) -> str:
    return f"registry:skillindex:building:{content_hash}"


def request_build(content_hash: str) -> bool:
    """Ask the worker to build this version's index, once per CLAIM_SECONDS whoever asks (a
    Redis SET NX); never raises. True when this call sent the task."""
    claim = _claim_key(content_hash)
    if not _breaker().call(lambda: bool(_client().set(claim, b"1", nx=True, ex=CLAIM_SECONDS)), fallback=False):
        return False
    if enqueue.send(SKILL_INDEX_TASK, what=f"the skill index of {content_hash[:12]}", content_hash=content_hash):
        return True
    _breaker().call(lambda: _client().delete(claim), fallback=None)  # the next miss asks again
    return False


def routing_index(content_hash: str, skills: list[dict[str, Any]], embedder: Any) -> tuple[Index | KeywordIndex, str]:
    """What a turn of this content routes with, and how ("full" or "keywords"): the process's
    cached index; else, for cards that cost at most SKILL_INDEX_INLINE_COST, the index built
    here (cheap: docs/reliability.md); else the worker's from Redis; else, while the worker builds
    it (asked here, once), the keyword index."""
    index = index_loaded(content_hash, embedder, lambda: None)
    if index is not None:
        return index, "full"
    if index_build_cost(skills) <= settings.SKILL_INDEX_INLINE_COST:
        return index_for(content_hash, skills, embedder), "full"
    index = index_loaded(content_hash, embedder, lambda: load(content_hash, skills, embedder))
    if index is not None:
        return index, "full"
    request_build(content_hash)
    return keyword_index(content_hash, skills), "keywords"


def _build_lock_key(content_hash: str) -> str:
    return f"registry:skillindex:lock:{content_hash}"


# Deletes the lock only while it holds this build's token: a build that outlived CLAIM_SECONDS
# must not release the lock another worker took since.
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def build_and_share(skills: list[dict[str, Any]], content_hash: str) -> str:
    """The worker's side: build the index (offline models) and store it, unless a valid entry is
    there already or another worker is building it. Returns what it did.

    The build lock (SET NX of this build's token, CLAIM_SECONDS; released by its holder only)
    keeps it to one build at a time: the publish sends its task without request_build's claim
    (registry sits below skills), so a turn that misses while the publish's build runs sends a
    second task, which finds the lock and stops. Redis away: it
    builds (it could not store the result either way, but the lock must not stop a build)."""
    lock, token = _build_lock_key(content_hash), secrets.token_bytes(16)
    if not _breaker().call(lambda: bool(_client().set(lock, token, nx=True, ex=CLAIM_SECONDS)), fallback=True):
        return "building elsewhere"
    try:
        if load(content_hash, skills) is not None:
            outcome = "present"
        else:
            warm_up()
            outcome = "stored" if store(content_hash, Index(skills, None, DEFAULT)) else "not stored"
    finally:
        _breaker().call(lambda: _client().eval(_RELEASE, 1, lock, token), fallback=None)
    _breaker().call(lambda: _client().delete(_claim_key(content_hash)), fallback=None)
    return outcome


def sweep(limit: int) -> dict[str, int]:
    """Ask the worker for the index of every big version some label targets whose entry is
    not in Redis, at most `limit` builds per run (the beat's skill-index-sweep): a build task lost
    (a worker killed mid-build, a broker that dropped it, Redis flushed or evicting) is sent again
    without waiting for a request to miss it. The claim of request_build keeps it to one per
    version per CLAIM_SECONDS, whoever asks. Redis away: nothing is sent (the turns route by
    keywords and ask again once it is back)."""
    versions = selectors.labelled_versions()
    names = [redis_key(content_hash) for _, content_hash in versions]

    def present() -> list[bool]:
        with _client().pipeline(transaction=False) as pipe:
            for name in names:
                pipe.exists(name)
            return [bool(n) for n in pipe.execute()]

    stored = _breaker().call(present, fallback=None) if names else []
    if stored is None:
        return {"labelled": len(versions), "missing": 0, "sent": 0}
    missing = sent = 0
    for (version_id, content_hash), there in zip(versions, stored, strict=True):
        if there or sent >= limit:
            continue
        skills = content_document(version_id=version_id, content_hash=content_hash).get("skills") or []
        if index_build_cost(skills) <= settings.SKILL_INDEX_INLINE_COST:
            continue  # a small version's index is built where it is used, never stored
        missing += 1
        sent += request_build(content_hash)
    return {"labelled": len(versions), "missing": missing, "sent": sent}
