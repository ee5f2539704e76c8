"""Sessions: the In and Out schemas of a session (start, and every answer that is a session) and
of the per-turn render, with the functions both HTTP lanes call for them (session_in,
session_out), and GET /sessions/{id}/. The per-turn calls themselves are api/routes.py's."""

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.common import BaseApi, IdentifierField, StrictBooleanField, StrictInput, StrictIntegerField
from core import limits
from sessions_app import selectors as session_selectors
from sessions_app.models import SessionStatus


class RenderIn(StrictInput):
    """The per-turn render's body (the DRF view and the fast lane both validate with it)."""

    variables = serializers.JSONField(required=False, allow_null=True)


class SessionIn(StrictInput):
    bundle = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    # A field named like Field.label (the stubs type that attribute): a declaration, not an override.
    label = IdentifierField(required=False, allow_null=True, max_length=limits.LABEL_NAME_MAX)  # type: ignore[assignment]
    version = StrictIntegerField(required=False, allow_null=True, min_value=1)
    external_id = IdentifierField(required=False, allow_null=True, max_length=limits.EXTERNAL_ID_MAX)
    ttl_seconds = StrictIntegerField(
        required=False, allow_null=True, min_value=limits.TTL_MIN_SECONDS, max_value=limits.TTL_MAX_SECONDS
    )
    # Session-scoped variable values; checked against the pinned version by session_start.
    variables = serializers.JSONField(required=False, allow_null=True)
    # Places the session in a label's percentage rollout (e.g. the end user's id).
    routing_key = IdentifierField(required=False, allow_null=True, max_length=limits.EXTERNAL_ID_MAX)
    # An evaluation run's session (with `version`): it leaves an unreleased version unreleased.
    evaluation = StrictBooleanField(
        required=False,
        help_text="An evaluation run's session, pinned by `version`: it leaves an unreleased version unreleased "
        "(docs/evals.md#evaluating-an-unreleased-version).",
    )


# What SessionIn accepts without a doubt: strings as IdentifierField takes them (non-empty, at
# most so long, storable), integers within its bounds, any JSON for variables, null for all
# but the bundle.
_SESSION_IN_TEXT = {
    "bundle": limits.BUNDLE_NAME_MAX,
    "label": limits.LABEL_NAME_MAX,
    "external_id": limits.EXTERNAL_ID_MAX,
    "routing_key": limits.EXTERNAL_ID_MAX,
}


_SESSION_IN_INT = {"version": (1, 2**63 - 1), "ttl_seconds": (limits.TTL_MIN_SECONDS, limits.TTL_MAX_SECONDS)}


def _plain_session_field(name: str, value: Any) -> bool:
    if value is None:
        return name != "bundle"
    if name in _SESSION_IN_TEXT:
        return isinstance(value, str) and 0 < len(value) <= _SESSION_IN_TEXT[name] and limits.storable(value)
    if name in _SESSION_IN_INT:
        low, high = _SESSION_IN_INT[name]
        return type(value) is int and low <= value <= high
    if name == "evaluation":
        return type(value) is bool
    return name == "variables"


def session_in(data: Any) -> dict[str, Any]:
    """SessionIn's validated data. A plain start body (the common case) is checked here, without
    DRF's per-instance field copies (a twentieth of a start's CPU); anything else goes through
    SessionIn, so every refusal is the serializer's own, to the byte."""
    if isinstance(data, dict) and "bundle" in data and all(_plain_session_field(k, v) for k, v in data.items()):
        return data
    serializer = SessionIn(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class SessionOut(serializers.Serializer):
    id = serializers.UUIDField()
    bundle = serializers.CharField(source="bundle.name")
    version = serializers.IntegerField(source="version.number")
    content_hash = serializers.CharField(source="version.content_hash")
    label = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # see SessionIn.label
    status = serializers.SerializerMethodField()
    started_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    external_id = serializers.CharField(allow_null=True)
    variables = serializers.JSONField()

    def get_status(self, session) -> str:
        return session_status(session)


def session_status(session) -> str:
    # A lease that ran out is expired now, even before the sweep writes it down.
    if session.status == SessionStatus.ACTIVE and session.expires_at <= timezone.now():
        return SessionStatus.EXPIRED
    return session.status


def _datetime_out(value: Any) -> str | None:
    """What serializers.DateTimeField renders: ISO 8601 in the current time zone, UTC as Z."""
    if not value:
        return None
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def session_out(session) -> dict[str, Any]:
    """SessionOut(session).data, built directly: DRF deep-copies a serializer's fields on every
    instance, which was a sixth of a session start's CPU. The same keys, order and values
    (tests/edge/test_fastlane.py compares both, and the fast lane's bytes with the DRF view's)."""
    return {
        "id": str(session.pk),
        "bundle": session.bundle.name,
        "version": session.version.number,
        "content_hash": session.version.content_hash,
        "label": session.label,
        "status": session_status(session),
        "started_at": _datetime_out(session.started_at),
        "last_seen_at": _datetime_out(session.last_seen_at),
        "expires_at": _datetime_out(session.expires_at),
        "ended_at": _datetime_out(session.ended_at),
        "external_id": session.external_id,
        "variables": session.variables,
    }


RenderOut = inline_serializer(
    name="RenderOut",
    fields={
        "prefix": inline_serializer(
            name="RenderPrefix",
            fields={"system": serializers.CharField(), "tools": serializers.ListField(child=serializers.DictField())},
        ),
        "prefix_sha256": serializers.CharField(),
        "tail": serializers.CharField(),
        "notices": serializers.ListField(child=serializers.DictField(child=serializers.CharField())),
        "version": serializers.IntegerField(),
        "content_hash": serializers.CharField(),
    },
)


class SessionDetailApi(BaseApi):
    @extend_schema(
        summary="Get a session",
        description=(
            "The session: its pinned version and content hash, status and lease. Visible to the key that "
            "started it and to ops."
        ),
        responses=SessionOut,
    )
    def get(self, request: Request, session_id) -> Response:
        # session_out: what every answer that is a session renders (the per-turn calls too).
        return Response(session_out(session_selectors.session_get(session_id=session_id, actor=actor_of(request))))
