"""The audit log over REST: its query, its event and the view."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, paginate
from api.pagination import paginated
from audit import selectors as audit_selectors


class AuditQuery(serializers.Serializer):
    """Filters of GET /api/v1/audit/ (query parameters; all optional)."""

    action = serializers.CharField(required=False, max_length=64)
    actor = serializers.CharField(required=False, max_length=200)
    target_type = serializers.CharField(required=False, max_length=32)
    target = serializers.CharField(required=False, max_length=300)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class AuditEventOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    actor = serializers.CharField()
    action = serializers.CharField()
    target_type = serializers.CharField()
    target = serializers.CharField()
    reason = serializers.CharField()
    data = serializers.DictField()  # type: ignore[assignment]  # the event's field, not Serializer.data
    request_id = serializers.CharField()
    client_ip = serializers.CharField(allow_null=True)


class AuditApi(BaseApi):
    roles = {"GET": Role.OPS}

    @extend_schema(
        summary="Audit log",
        description=(
            "Ops role. Every state change, newest first, filtered by action, actor, target and time; a scoped"
            " key sees only events about its bundles. Never holds content or secrets. Paged by cursor."
        ),
        operation_id="audit_list",
        parameters=[AuditQuery],
        responses=paginated(AuditEventOut),
    )
    def get(self, request: Request) -> Response:
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        events = audit_selectors.audit_events(actor_scope=actor_of(request), **query.validated_data)
        return paginate(self, request, events, AuditEventOut, "-id")
