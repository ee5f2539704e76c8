"""Tool signatures (GET /tools/, GET /tools/{name}/): which signatures live sessions can still
call, and the MCP drift check. Serializers, then thin views over registry.selectors and
registry.mcp_drift."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi
from api.pagination import Cursor, paginated
from api.views.versions import ChangeOut
from registry import mcp_drift, selectors
from registry.models import ToolState, VersionState


class ToolVersionOut(serializers.Serializer):
    version = serializers.IntegerField()
    state = serializers.ChoiceField(choices=VersionState.values)
    labels = serializers.ListField(child=serializers.CharField(), help_text="The labels that target this version.")
    sessions_active = serializers.IntegerField(help_text="Active sessions pinned to it (bounded, as every count).")


class ToolBundleOut(serializers.Serializer):
    name = serializers.CharField()
    versions = ToolVersionOut(many=True)


class ToolSignatureOut(serializers.Serializer):
    name = serializers.CharField()
    schema_hash = serializers.CharField(help_text="sha256 of the canonical {input_schema, output_schema?}.")
    state = serializers.ChoiceField(choices=ToolState.values)
    sessions_active = serializers.IntegerField(help_text="Active sessions that can call it.")
    first_seen_at = serializers.DateTimeField(allow_null=True)
    last_seen_at = serializers.DateTimeField(allow_null=True)
    bundles = ToolBundleOut(many=True)
    versions_total = serializers.IntegerField()
    versions_truncated = serializers.BooleanField()
    schema = serializers.JSONField()


class ToolDiffOut(serializers.Serializer):
    from_hash = serializers.CharField()
    to_hash = serializers.CharField()
    level = serializers.CharField()
    changes = ChangeOut(many=True)


class ToolOut(serializers.Serializer):
    name = serializers.CharField()
    signatures = ToolSignatureOut(many=True)
    signatures_truncated = serializers.BooleanField()
    diffs = ToolDiffOut(many=True)


class ToolListApi(BaseApi):
    @extend_schema(
        summary="Tool signatures",
        description=(
            "Every tool signature (name and schema hash) carried by a version of a bundle this key may see, by "
            "name, with the bundles and versions that carry it, the active sessions that can call it, first and "
            "last seen and its state: live, draining or drained. Paged by cursor."
        ),
        operation_id="tools_list",
        responses=paginated(ToolSignatureOut),
    )
    def get(self, request: Request) -> Response:
        actor = actor_of(request)
        paginator = Cursor()
        paginator.ordering = ("name", "pk")  # type: ignore[assignment]  # DRF takes a tuple too
        page = paginator.paginate_queryset(selectors.tools_visible(actor=actor), request, view=self)
        rows = selectors.tools_described(signatures=page, actor=actor)
        return paginator.get_paginated_response(ToolSignatureOut(rows, many=True).data)


class ToolDetailApi(BaseApi):
    @extend_schema(
        summary="One tool's signatures",
        description=(
            "The signatures of one tool name this key may see, oldest first, side by side, with the classified "
            "schema diff from each to the next. 404 for a name no visible bundle carries."
        ),
        operation_id="tools_get",
        responses=ToolOut,
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(ToolOut(selectors.tool_get(name=name, actor=actor_of(request))).data)


class McpDriftOut(serializers.Serializer):
    bundle = serializers.CharField()
    version = serializers.IntegerField()
    server = serializers.CharField()
    url = serializers.CharField()
    tool = serializers.CharField()
    kind = serializers.ChoiceField(choices=["removed", "changed"])
    pinned_hash = serializers.CharField()
    live_hash = serializers.CharField(help_text="Empty when the tool was removed.")
    sessions_active = serializers.IntegerField()
    sessions = serializers.ListField(child=serializers.CharField(), help_text="At most 50 session ids at risk.")
    announced = serializers.BooleanField(help_text="First seen by this check (sent as tool.drift).")


class McpCheckOut(serializers.Serializer):
    checked = serializers.IntegerField(help_text="Pinned tools compared with their servers.")
    servers = serializers.IntegerField(help_text="Servers listed.")
    new = serializers.IntegerField(help_text="Drifts first seen by this check (announced as tool.drift).")
    resolved = serializers.IntegerField()
    drifts = McpDriftOut(many=True)
    unreachable = serializers.DictField(child=serializers.CharField(), help_text="url -> why it could not be listed.")


class McpCheckApi(BaseApi):
    roles = {"POST": Role.OPS}

    @extend_schema(
        summary="Run the MCP drift check now",
        description=(
            "Ops role. Lists every MCP server the live and draining versions pinned tools from and compares "
            "with the pins, as the periodic check does: each drift (a tool removed or its schema changed) is "
            "recorded and announced as tool.drift once. Answers what it found, of the bundles this key may "
            "see. What `promptreg mcp check` calls."
        ),
        operation_id="tools_mcp_check",
        request=None,
        responses=McpCheckOut,
    )
    def post(self, request: Request) -> Response:
        report = mcp_drift.mcp_drift_check()
        return Response(McpCheckOut(report.seen_by(actor_of(request))).data)
