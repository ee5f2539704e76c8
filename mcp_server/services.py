"""The MCP tools' writes, as plain functions over the same services and selectors as the REST
API: key scopes and roles are checked where they always are (bundle_get, session_start,
session_end, the session selectors), so the shell holds no rule of its own.

Everything here is synchronous Django code; mcp_server.server runs it on a worker thread."""

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from access import ratelimit
from access.actors import Actor
from audit.services import audit_record
from core.errors import InvalidContent, NotFound
from knowledge import tools as knowledge_tools
from knowledge.render import session_render
from registry import selectors as registry_selectors
from registry.parsed_content import content_document
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services
from turns.compose import session_steps
from turns.layout import turn_cards, turn_text


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


# How a host takes each turn: over MCP, the take_turn tool (this turn's text and skills); a host
# that also calls HTTP with the key may use the turn endpoint, which answers the compacted
# messages and a provider request too.
PER_TURN = (
    "Each turn, call take_turn with session_id={session_id} and the user's latest message: it answers "
    "this turn's text (date, time, notices) and skill cards to show the model with that message. "
    "Over HTTP with the API key: POST /api/v1/sessions/{session_id}/turn/ does the same in one call."
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


# --- The per-turn tools: this turn's text and skills, and the knowledge file tools ----------


@dataclass(frozen=True)
class Turn:
    """One turn of a session for an MCP host: the text to show the model with the user's latest
    message (the render's tail: date, time, notices; then this turn's skill cards, as the turn
    call lays them out), and which skills were loaded and why."""

    session_id: str
    turn: int
    text: str
    skills: dict[str, Any]
    notices: list[dict[str, str]]
    reported: dict[str, Any] | None


MAX_TURN_TEXT = 100_000  # characters of the user's message routed on; more is refused, not cut


@transaction.atomic
def turn_take(*, actor: Actor, session_id: str, text: str, invoked: list[str] | None = None) -> Turn:
    """Report what the model invoked in the previous turn (when given), route this turn's skills
    on `text`, render the tail: the turn call's own steps (turns.compose.session_steps), in one
    transaction, so a refused report opens no turn."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TURN_TEXT:
        raise InvalidContent(
            "text must be the user's latest message.",
            {"text": [f"A non-empty string of at most {MAX_TURN_TEXT} characters."]},
        )
    session = session_services.session_use(session_id=_session_uuid(session_id), actor=actor)
    steps = session_steps(session=session, actor=actor, messages=[{"role": "user", "content": text}], invoked=invoked)
    route, rendered = steps.route, steps.rendered
    content = content_document(version_id=session.version_id, content_hash=rendered.content_hash)
    return Turn(
        session_id=str(session.pk),
        turn=route["turn"],
        text=turn_text(rendered.tail, turn_cards(content, route, steps.session_cards)),
        skills={
            "resident": route["resident"],
            "routed": [r["name"] for r in route["routed"]],
            "session": route["session"],
        },
        notices=rendered.notices,
        reported=steps.reported,
    )


def turn_as_dict(turn: Turn) -> dict[str, Any]:
    return asdict(turn)


def file_tool(*, actor: Actor, session_id: str, tool: str, **params: Any) -> str:
    """One of the model's file tools (ls, glob, grep, read) over the session's knowledge packs:
    knowledge.tools, as GET .../knowledge/{tool} runs it, under the same per-key concurrency
    slot. The answer is the text the model reads (cut at 100 KB, its last line then says so)."""
    run = knowledge_tools.TOOLS[tool]
    slot = ratelimit.file_tool_slot(actor=actor)
    if slot is None:
        raise FileToolsBusy(
            f"This key already has {settings.FILE_TOOL_CONCURRENCY} file-tool calls running: wait for one to finish."
        )
    with slot:
        return run(session_id=_session_uuid(session_id), actor=actor, **params).output


class FileToolsBusy(Exception):
    """The key's file-tool slots are all taken (REST answers 429 `throttled`)."""
