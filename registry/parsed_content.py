"""Parsed content documents, kept per process by content hash.

A version's content never changes, so an entry can never be stale; per-turn calls (render,
the file tools) and session start read declarations from here instead of parsing up to 1 MiB
of JSON each time. Callers must treat the returned documents as read-only."""

import json
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any

from registry import bundle_cache


@lru_cache(maxsize=64)
def _load(content_hash: str, version_id: int) -> dict[str, Any]:
    content: dict[str, Any] = json.loads(bundle_cache.content_bytes(version_id=version_id, content_hash=content_hash))
    return content


def content_document(*, version_id: int, content_hash: str) -> dict[str, Any]:
    return _load(content_hash, version_id)


# A version's model settings by content hash (scalars only, so an entry is a few bytes).
_MODELS: OrderedDict[str, tuple[tuple[str, Any], ...]] = OrderedDict()
_MODELS_MAX = 8192
_models_lock = threading.Lock()
# content hash -> model name (or None); cleared with _MODELS when that is full.
_NAMES: dict[str, object] = {}
_MISSING = object()


def version_model_name(*, version_id: int, content_hash: str, canonical: bytes | None = None) -> str | None:
    """The model name a version's settings give (`name`, or `model`, `id`), or None; a dict
    lookup once the version's model is kept (version_model)."""
    found = _NAMES.get(content_hash, _MISSING)
    if found is _MISSING:
        model = version_model(version_id=version_id, content_hash=content_hash, canonical=canonical)
        found = next((v for k in ("name", "model", "id") if isinstance(v := model.get(k), str) and v), None)
        _NAMES[content_hash] = found
    return found if isinstance(found, str) else None


def version_model(*, version_id: int, content_hash: str, canonical: bytes | None = None) -> dict[str, Any]:
    """A version's `model` settings (their scalar fields), kept per process by content hash
    apart from the documents themselves: the pinned calls ask it on every fetch (is the model
    retired?), and it is a few bytes where a document may be a MiB. `canonical`: the version's
    bytes when the caller holds them (a locked row), so no read is needed."""
    found = _MODELS.get(content_hash)
    if found is None:
        if canonical is not None:
            model = json.loads(canonical).get("model")
        else:
            model = content_document(version_id=version_id, content_hash=content_hash).get("model")
        items = model.items() if isinstance(model, dict) else ()
        found = tuple((k, v) for k, v in items if isinstance(v, str | int | float | bool) or v is None)
        with _models_lock:
            _MODELS[content_hash] = found
            if len(_MODELS) > _MODELS_MAX:
                _MODELS.popitem(last=False)
                _NAMES.clear()
    return dict(found)
