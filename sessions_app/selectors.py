"""Reads of sessions, including the hot path: the pinned bundle."""

from typing import Any

from access.actors import Actor
from access.models import Role
from registry import bundle_cache
from registry.canonical import canonical_bytes
from registry.errors import NotFound, VersionRevoked
from registry.models import VersionState
from registry.selectors import label_targets
from sessions_app.models import Session
from sessions_app.services import session_renew


def session_get(*, session_id: Any, actor: Actor) -> Session:
    """The session, if this actor may see it: the key that started it, or ops and above.
    Anyone else gets 404, so session ids cannot be probed."""
    session = (
        Session.objects.select_related("bundle", "version").defer("version__canonical").filter(pk=session_id).first()
    )
    if session is None or (session.api_key_id != actor.api_key_id and not actor.has_role(Role.OPS)):
        raise NotFound(f"No session {session_id}.")
    return session


def session_for_fetch(*, session_id: Any, actor: Actor, force_renew: bool = False) -> Session:
    """The checks of the hot path and of heartbeats: one indexed read (session, version,
    bundle), then a lease renewal that writes only every quarter-TTL unless forced.
    Raises 410s for ended, expired and revoked."""
    session = session_get(session_id=session_id, actor=actor)
    version = session.version
    if version.state == VersionState.REVOKED:
        raise VersionRevoked(
            f"Version {version.number} of {session.bundle.name!r} was revoked; start a new session.",
            {"labels": label_targets(session.bundle_id)},
        )
    return session_renew(session=session, force=force_renew)


def pinned_bundle_body(session: Session) -> bytes:
    """The canonical JSON of {"bundle", "content", "content_hash", "version"}: the keys are
    already in sorted order and the content is spliced in as its stored canonical bytes,
    cached by content hash, never re-serialised."""
    version = session.version
    content = bundle_cache.content_bytes(version_id=version.pk, content_hash=version.content_hash)
    return b"".join(
        [
            b'{"bundle":',
            canonical_bytes(session.bundle.name),
            b',"content":',
            content,
            b',"content_hash":"',
            version.content_hash.encode(),
            b'","version":',
            str(version.number).encode(),
            b"}",
        ]
    )
