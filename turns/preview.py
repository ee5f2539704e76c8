"""A turn of a session, without a session: the provider request the turn call would hand over for
a conversation on a version, or on a draft not published (the admin's version page shows it for
one user message; its playground for a conversation). The same steps as the turn call
(turns.compose: prepare, then lay_out), with the session's writes replaced by what they give:
skills.services.route_preview for the route, on the earlier turns' routes the caller kept (what
a session's skill turns hold: the playground keeps them with its conversation), and
knowledge.render's prefix and tail for the render. A session's own (L3) cards are not
previewed: they exist only in a session, registered through its API."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.errors import InvalidContent
from knowledge.render import build_tail, content_prefix, zone_name
from registry.models import BundleVersion
from registry.parsed_content import content_document
from skills.services import route_preview
from turns import providers
from turns.compose import lay_out, prepare, turn_variables
from turns.request import TurnRequest

MAX_PREVIEW_MESSAGE = 20_000  # characters of the one user message the preview routes on
MAX_PREVIEW_CONVERSATION = 200_000  # characters of a whole conversation


@dataclass(frozen=True)
class Draft:
    """Content not published, canonical (registry.canonical.canonicalise, includes resolved)."""

    content: dict[str, Any]
    content_hash: str


def _content_and_prefix(subject: BundleVersion | Draft, session_variables: Any) -> tuple[dict[str, Any], Any, Any]:
    if isinstance(subject, BundleVersion):
        content = content_document(version_id=subject.pk, content_hash=subject.content_hash)
    else:
        content = subject.content
    prefix, values = content_prefix(
        content=content, content_hash=subject.content_hash, session_variables=session_variables
    )
    return content, prefix, values


@dataclass(frozen=True)
class PreviewTurn:
    request: providers.ProviderRequest
    route: dict[str, Any]  # as the turn call answers it (resident, routed, demoted, turn, ...)


def conversation_request(
    *,
    subject: BundleVersion | Draft,
    fmt: str,
    session_variables: Any,
    variables: Any,
    messages: list[dict[str, Any]],
    earlier: Sequence[dict[str, Any] | None] = (),
    now: datetime | None = None,
) -> PreviewTurn:
    """The body the turn call (POST /sessions/{id}/turn/ with `format`) hands over for `messages`
    on a session of `subject` started with `session_variables`, with the turn's `variables`, and
    the route it took. `earlier`: the routes of the session's previous turns, oldest first, each
    {"routed": [names], "invoked": [names] or None} (skills.services.route_preview); none: the
    first turn of a new session. Raises InvalidContent for what the endpoint refuses."""
    if fmt not in providers.FORMATS:
        raise InvalidContent("Unknown format.", {"format": [f"One of {', '.join(providers.FORMATS)}."]})
    if sum(len(str(m.get("content", ""))) for m in messages) > MAX_PREVIEW_CONVERSATION:
        raise InvalidContent("The conversation is too long.", {"message": [f"At most {MAX_PREVIEW_CONVERSATION}."]})
    content, prefix, values = _content_and_prefix(subject, session_variables)
    turn = turn_variables(content, variables)
    # Prepared as a neutral request (format=None): the preview lays out the pinned model as it
    # stands, one that names no model included.
    request = TurnRequest(messages=messages, invoked=None, variables=variables, prefix_sha256=None, format=None, k=0)
    prepared = prepare(request, content)
    route = route_preview(
        content_hash=subject.content_hash, skills=content.get("skills") or [], messages=messages, earlier=earlier
    )
    tail = build_tail(now=now or timezone.now(), zone_name=zone_name(values), turn=turn, notices=[])
    layout = lay_out(
        fmt=fmt, content=content, prepared=prepared, prefix=prefix, tail=tail, route=route, session_cards=[]
    )
    assert layout.built is not None  # a format was given
    return PreviewTurn(request=layout.built, route=route)
