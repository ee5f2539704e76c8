"""Thin REST views for skills routing, turns, session skills, metrics and compaction (issue 12)."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.views import BaseApi
from core.compaction import CompactionError, compact, policy_from_content
from registry.errors import InvalidContent
from sessions_app import selectors as session_selectors
from skills import selectors as skill_selectors


class SessionCompactApi(BaseApi):
    """Tier-1 micro-compaction of old tool results under the pinned version's policy."""

    @extend_schema(request=dict, responses={200: OpenApiResponse(description="Compacted messages and counts")})
    def post(self, request: Request, session_id) -> Response:
        body = request.data
        if not isinstance(body, dict) or "messages" not in body:
            raise InvalidContent('Send {"messages": [...]}.', {"messages": ["This field is required."]})
        session = session_selectors.session_for_fetch(session_id=session_id, actor=request.auth)
        policy = policy_from_content(skill_selectors.session_content(session))
        try:
            result = compact(body["messages"], policy)
        except CompactionError as exc:
            raise InvalidContent("The messages are not in a chat shape this reads.", {exc.path: [exc.message]})
        return Response(result.as_dict())
