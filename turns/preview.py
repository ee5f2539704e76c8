"""The first turn of a new session, without a session: the provider request the turn call would
hand over for one user message on a version (the admin's version page shows it). The same
steps as the turn call (turns.compose: prepare, then lay_out), with the session's writes
replaced by what they give on a session with no history: skills.services.route_preview for
the route, knowledge.render's prefix and tail for the render."""

from datetime import datetime
from typing import Any

from django.utils import timezone

from core.errors import InvalidContent
from knowledge.render import build_tail, version_prefix, zone_name
from registry.models import BundleVersion
from registry.parsed_content import content_document
from skills.services import route_preview
from turns import providers
from turns.compose import lay_out, prepare, turn_variables
from turns.request import TurnRequest

MAX_PREVIEW_MESSAGE = 20_000  # characters of the one user message the preview routes on


def first_turn_request(
    *,
    version: BundleVersion,
    fmt: str,
    session_variables: Any,
    variables: Any,
    message: str,
    now: datetime | None = None,
) -> providers.ProviderRequest:
    """The body the turn call (POST /sessions/{id}/turn/ with `format`) hands over on the first
    turn of a new session of `version` started with `session_variables`, for the one user
    message `message` and the turn's `variables`. Raises InvalidContent for what the endpoint
    refuses."""
    if fmt not in providers.FORMATS:
        raise InvalidContent("Unknown format.", {"format": [f"One of {', '.join(providers.FORMATS)}."]})
    if len(message) > MAX_PREVIEW_MESSAGE:
        raise InvalidContent("The message is too long.", {"message": [f"At most {MAX_PREVIEW_MESSAGE} characters."]})
    content = content_document(version_id=version.pk, content_hash=version.content_hash)
    prefix, values = version_prefix(
        version_id=version.pk, content_hash=version.content_hash, session_variables=session_variables
    )
    turn = turn_variables(content, variables)
    messages = [{"role": "user", "content": message}]
    # Prepared as a neutral request (format=None): one user message breaks no provider's rule, and
    # the preview lays out the pinned model as it stands, one that names no model included.
    request = TurnRequest(messages=messages, invoked=None, variables=variables, prefix_sha256=None, format=None, k=0)
    prepared = prepare(request, content)
    route = route_preview(content_hash=version.content_hash, skills=content.get("skills") or [], messages=messages)
    tail = build_tail(now=now or timezone.now(), zone_name=zone_name(values), turn=turn, notices=[])
    layout = lay_out(
        fmt=fmt, content=content, prepared=prepared, prefix=prefix, tail=tail, route=route, session_cards=[]
    )
    assert layout.built is not None  # a format was given
    return layout.built
