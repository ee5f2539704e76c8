"""The thin shell's SKILL.md: the session rules, as the MCP server's instructions also carry them."""

import hashlib

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request

from api.common import BaseApi
from sessions_app import rules


class ShellSkillApi(BaseApi):
    @extend_schema(
        operation_id="shell_skill_md",
        summary="The shell's SKILL.md (session rules)",
        description=(
            "The skill an agent host installs instead of a snapshot of any process: how to list the "
            "capabilities, fetch a protocol per session and follow it. The same rules, with the same "
            "version, are the MCP server's instructions. `X-Skill-Version` carries the version."
        ),
        responses={(200, "text/markdown"): OpenApiResponse(description="SKILL.md")},
    )
    def get(self, request: Request) -> HttpResponse:
        text = rules.skill_md()
        response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
        response["X-Skill-Version"] = rules.version()
        response["ETag"] = f'"{hashlib.sha256(text.encode()).hexdigest()}"'
        return response
