"""Reads for skills: a session's pinned content (parsed once per content hash per process)."""

import json
from collections import OrderedDict
from threading import Lock
from typing import Any

from registry import bundle_cache
from sessions_app.models import Session

# Content is immutable per hash, so a parsed document never goes stale; the bound only caps memory.
_CONTENT: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
_CONTENT_MAX = 64
_lock = Lock()


def session_content(session: Session) -> dict[str, Any]:
    """The pinned version's content document, parsed (from the shared bytes cache on a miss)."""
    version = session.version
    digest = version.content_hash
    with _lock:
        doc = _CONTENT.get(digest)
        if doc is not None:
            _CONTENT.move_to_end(digest)
            return doc
    data = bundle_cache.content_bytes(version_id=version.pk, content_hash=digest)
    doc = json.loads(data)
    with _lock:
        _CONTENT[digest] = doc
        while len(_CONTENT) > _CONTENT_MAX:
            _CONTENT.popitem(last=False)
    return doc
