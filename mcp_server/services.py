"""The MCP tools' writes, as plain functions over the same services and selectors as the REST
API: key scopes and roles are checked where they always are (bundle_get, session_start,
session_end, the session selectors), so the shell holds no rule of its own.

Everything here is synchronous Django code; mcp_server.server runs it on a worker thread."""

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction

from access.actors import Actor
from audit.services import audit_record
from core.errors import InvalidContent, NotFound
from knowledge.render import session_render
from registry import selectors as registry_selectors
from registry.parsed_content import content_document
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services


@dataclass(frozen=True)
class Protocol:
    """A capability's protocol for one pinned session. `system_prompt` and `tools` are the
    rendered, cache-stable prefix; `reminder` is the volatile tail (date, notices)."""

    session_id: str
    capability: str
    label: str | None
    version: int
    content_hash: str
    resource: str
    system_prompt: str
    tools: list[dict[str, Any]]
    guardrails: dict[str, Any]
    output_schema: dict[str, Any] | None
    reminder: str
    started: bool
    per_turn: str  # how an agent host takes each turn of this session in one HTTP call


# One line for agent hosts that call HTTP too: the turn endpoint answers everything the model
# sees this turn (prefix, tail, skills, compacted messages, a provider request) in one call.
PER_TURN = (
    "Each later turn in one call: POST /api/v1/sessions/{session_id}/turn/ with messages (invoked, "
    "variables, format for a provider request ready to send, prefix_sha256 to skip an unchanged prefix)."
)


def _session_uuid(session_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(session_id))
    except ValueError:
        raise InvalidContent("session_id is not a session id.", {"session_id": ["A UUID."]}) from None


def protocol_fetch(
    *, actor: Actor, capability: str, label: str | None = None, session_id: str | None = None
) -> Protocol:
    """Pin a new session on `capability` (its `label`, default production), or continue
    `session_id`, and return its protocol. Audited as `protocol.fetched`: who, which session
    and version; never the protocol's text."""
    started = session_id is None
    if session_id is None:
        bundle = registry_selectors.bundle_get(name=capability, actor=actor)
        session, started = session_services.session_start(bundle=bundle, actor=actor, label=label)
    else:
        session = session_selectors.session_get(session_id=_session_uuid(session_id), actor=actor)
        if session.bundle.name != capability:
            raise NotFound(f"Session {session_id} is not a session of {capability!r}.")
    # The same render as POST /sessions/{id}/render/: renews the lease, 410 when ended or revoked.
    rendered = session_render(session_id=session.pk, actor=actor)
    content = content_document(version_id=session.version_id, content_hash=rendered.content_hash)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="protocol.fetched",
            target_type="session",
            target=str(session.pk),
            data={
                "bundle": capability,
                "version": rendered.version,
                "content_hash": rendered.content_hash,
                "session_started": started,
                "via": "mcp",
            },
        )
    return Protocol(
        session_id=str(session.pk),
        capability=capability,
        label=session.label,
        version=rendered.version,
        content_hash=rendered.content_hash,
        resource=f"bundle://{capability}@sha256:{rendered.content_hash}",
        system_prompt=rendered.prefix.system,
        tools=rendered.prefix.tools,
        guardrails=content.get("guardrails", {}),
        output_schema=content.get("output_schema"),
        reminder=rendered.tail,
        started=started,
        per_turn=PER_TURN.format(session_id=session.pk),
    )


def protocol_as_dict(protocol: Protocol) -> dict[str, Any]:
    return asdict(protocol)


def session_finish(*, actor: Actor, session_id: str) -> dict[str, Any]:
    """End a session (idempotent), as POST /sessions/{id}/end/ does."""
    session = session_selectors.session_get(session_id=_session_uuid(session_id), actor=actor)
    ended = session_services.session_end(session=session, actor=actor)
    return {
        "session_id": str(ended.pk),
        "status": ended.status,
        "ended_at": ended.ended_at.isoformat() if ended.ended_at else None,
    }


def bundle_bytes(*, actor: Actor, name: str, content_hash: str) -> bytes:
    """The canonical content of the version of `name` whose hash is `content_hash`, if the key
    may see the bundle: immutable, so a host may keep it for ever."""
    bundle = registry_selectors.bundle_get(name=name, actor=actor)
    version = registry_selectors.versions_of(bundle).filter(content_hash=content_hash).first()
    if version is None:
        raise NotFound(f"Bundle {name!r} has no version with content hash {content_hash}.")
    return bytes(version.canonical)
