"""The per-turn calls on a session, as every entry point makes them.

An agent calls these on every turn (fetch, heartbeat, render) or once per session (start,
end). Each is one function here, called by the route table's entry (api/routes.py), which
both HTTP lanes serve: the DRF view Django runs and the fast lane (api/fastlane.py). The
fast lane reads the session joined with the caller's key in one statement and passes it as
`loaded` (None when no such session exists); without `loaded` the function reads the
session itself. Either way the same rules run (sessions_app.selectors.session_checked, the
lease in sessions_app.services.session_touch), so the two lanes cannot disagree on them.

Nothing here knows about HTTP: the entries turn these results into answers."""

from typing import Any, Final

from access.actors import Actor
from registry import bundle_cache
from registry import selectors as registry_selectors
from registry.models import Bundle
from sessions_app.models import Session
from sessions_app.selectors import require_session_role, session_checked, session_get, session_visible
from sessions_app.services import session_end, session_start, session_touch, session_use


class _Unread:
    """The type of UNREAD: `loaded` was not given, so the call reads the session itself."""


UNREAD: Final = _Unread()
Loaded = Session | None | _Unread


def session_started(*, actor: Actor, data: dict[str, Any], bundle: Bundle | None = None) -> tuple[Session, bool]:
    """Start a session from a validated SessionIn: the bundle (404 outside the key's scope;
    `bundle` when the caller read it already), the version when one is named, then
    sessions_app.services.session_start. (session, created). 403 first for a key whose role
    holds no sessions, before anything about the bundle is looked up."""
    require_session_role(actor)
    if bundle is None or bundle.name != data["bundle"] or not actor.may_see_bundle(bundle.name):
        bundle = registry_selectors.bundle_for_start(name=data["bundle"], actor=actor)
    version = None
    if data.get("version") is not None:
        version = registry_selectors.version_get(bundle=bundle, number=data["version"])
    return session_start(
        bundle=bundle,
        actor=actor,
        label=data.get("label"),
        version=version,
        external_id=data.get("external_id"),
        ttl_seconds=data.get("ttl_seconds"),
        variables=data.get("variables"),
        routing_key=data.get("routing_key"),
        evaluation=bool(data.get("evaluation")),
    )


def session_for_turn(*, session_id: Any, actor: Actor, loaded: Loaded = UNREAD, force: bool = False) -> Session:
    """The session of a per-turn call, checked (404, 410 revoked or ended) and its lease renewed
    (410 for a lease that ran out; `force` for a heartbeat): sessions_app.services.session_use,
    or the same two rules on the session the caller read already."""
    if isinstance(loaded, _Unread):
        return session_use(session_id=session_id, actor=actor, force=force)
    return session_touch(session=session_checked(session=loaded, session_id=session_id, actor=actor), force=force)


def turn_fetch(*, session_id: Any, actor: Actor, loaded: Loaded = UNREAD) -> Session:
    """GET the pinned bundle: the session, checked and touched (a lease write only when due)."""
    return session_for_turn(session_id=session_id, actor=actor, loaded=loaded)


def turn_heartbeat(*, session_id: Any, actor: Actor, loaded: Loaded = UNREAD) -> Session:
    """Renew the lease by the session's TTL (always written)."""
    return session_for_turn(session_id=session_id, actor=actor, loaded=loaded, force=True)


def session_seen(*, session_id: Any, actor: Actor, loaded: Loaded = UNREAD) -> Session:
    """The session of a call that acts on it whatever its state (an end, a score): 404 unless
    `actor` may see it; the one the fast lane read, or read here."""
    if isinstance(loaded, _Unread):
        return session_get(session_id=session_id, actor=actor)
    return session_visible(session=loaded, session_id=session_id, actor=actor)


def turn_end(*, session_id: Any, actor: Actor, loaded: Loaded = UNREAD) -> Session:
    """End the session (ending an ended one answers it as it is)."""
    return session_end(session=session_seen(session_id=session_id, actor=actor, loaded=loaded), actor=actor)


def pinned_content(*, version_id: int, content_hash: str, held: bool) -> bytes | None:
    """The version's canonical bytes, or None when the client holds them already (its
    If-None-Match named this content hash): a fetch then answers 304 without reading them."""
    if held:
        return None
    return bundle_cache.content_bytes(version_id=version_id, content_hash=content_hash)
