"""Parsed content documents, kept per process by content hash.

A version's content never changes, so an entry can never be stale; per-turn calls (render,
the file tools) and session start read declarations from here instead of parsing up to 1 MiB
of JSON each time. Callers must treat the returned documents as read-only."""

import json
from functools import lru_cache
from typing import Any

from registry import bundle_cache


@lru_cache(maxsize=64)
def _load(content_hash: str, version_id: int) -> dict[str, Any]:
    content: dict[str, Any] = json.loads(bundle_cache.content_bytes(version_id=version_id, content_hash=content_hash))
    return content


def content_document(*, version_id: int, content_hash: str) -> dict[str, Any]:
    return _load(content_hash, version_id)


@lru_cache(maxsize=8192)
def _model(content_hash: str, version_id: int) -> tuple[tuple[str, Any], ...] | None:
    model = content_document(version_id=version_id, content_hash=content_hash).get("model")
    if not isinstance(model, dict):
        return None
    return tuple((k, v) for k, v in model.items() if isinstance(v, str | int | float | bool) or v is None)


def version_model(*, version_id: int, content_hash: str) -> dict[str, Any]:
    """A version's `model` settings (their scalar fields), kept per process by content hash
    apart from the documents themselves: the pinned calls ask it on every fetch (is the model
    retired?), and it is a few bytes where a document may be a MiB."""
    found = _model(content_hash, version_id)
    return dict(found) if found else {}
