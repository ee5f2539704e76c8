"""Sentence vectors for the router's semantic path: offline by default, a team's endpoint if set.

The offline model is WordLlama's `l2_supercat` at 256 dimensions: static token embeddings
(32,000 x 256) averaged over a text's tokens, so embedding a message is a tokenizer call and a
mean (about 0.1 ms). Its weights and tokenizer ship inside the `wordllama` wheel. We read those
two files ourselves rather than through `WordLlama.load()`: the loader looks for the tokenizer
in `wordllama/tokenizer/` while the wheel puts it in `wordllama/tokenizers/`, and then falls
back to downloading it from Hugging Face; it also calls `logging.basicConfig` at import. Nothing
here opens a socket (tests/test_skills_semantic.py loads and embeds with connect blocked).

The model knows English words only (its tokenizer is Llama 2's, and Chinese falls apart into
bytes), so the router gives it the English text of a message plus the English words of the
lexicon concepts its Chinese words belong to (skills.lexicon.english_of); an endpoint gets the
texts as written (skills.router._SemanticIndex).

`RemoteEmbedder` calls an OpenAI-compatible `POST {url}/v1/embeddings` (a team's own,
perhaps multilingual, model). Any failure (timeout, status, shape) falls back to the offline
model for that call, and the endpoint is left alone for RETRY_AFTER seconds, so a dead endpoint
costs one timeout per half minute rather than one per turn.
"""

import importlib.util
import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["Embedder", "RemoteEmbedder", "StaticModel", "local_model"]

logger = logging.getLogger(__name__)

MODEL_FILES = ("weights/l2_supercat_256.safetensors", "tokenizers/l2_supercat_tokenizer_config.json")
MAX_TEXT_CHARS = 2000  # per text sent to a model: bounds tokenising and the request body
QUERY_CACHE = 4096  # message texts whose vectors are kept (a turn's context repeats in the next turn)
RETRY_AFTER = 30.0  # seconds an endpoint is left alone after a failure
MAX_BATCH = 64  # texts per request to an endpoint


class Embedder(Protocol):
    """Turns texts into unit vectors (one row per text, float32). `name` says which model
    (a card vector and a query vector are compared only when their names agree)."""

    name: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _package_dir() -> Path:
    # find_spec does not import the package (its __init__ configures the root logger).
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("wordllama is not installed (requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


class StaticModel:
    """WordLlama's static embeddings, loaded from the files inside the wheel."""

    name = "wordllama-l2_supercat-256"

    def __init__(self, root: Path | None = None) -> None:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        root = root or _package_dir()
        weights, tokenizer = (root / f for f in MODEL_FILES)
        with safe_open(str(weights), framework="np") as f:
            # Kept in float16 as shipped (16 MB per process, not 32); means are taken in float32.
            self.matrix = np.ascontiguousarray(f.get_tensor("embedding.weight"))
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.dim = int(self.matrix.shape[1])

    def _one(self, text: str) -> np.ndarray:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        ids = self.tokenizer.encode(text[:MAX_TEXT_CHARS], add_special_tokens=False).ids
        if not ids:
            vector = np.zeros(self.dim, dtype=np.float32)
        else:
            vector = self.matrix[np.clip(ids, 0, self.matrix.shape[0] - 1)].mean(axis=0, dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            vector = vector / norm if norm else vector
        vector.setflags(write=False)
        with self._lock:
            self._cache[text] = vector
            while len(self._cache) > QUERY_CACHE:
                self._cache.popitem(last=False)
        return vector

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t) for t in texts])


_model: StaticModel | None = None
_model_lock = threading.Lock()


def local_model() -> StaticModel:
    """The offline model, loaded once per process (about 0.8 s, 16 MB)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = StaticModel()
    return _model


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

    def available(self) -> bool:
        return time.monotonic() - self.failed_at >= RETRY_AFTER

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

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self.embed_remote(texts)
        return vectors if vectors is not None else local_model().embed(texts)


def describe(embedder: Any) -> str:
    return getattr(embedder, "name", type(embedder).__name__)
