"""Webhook endpoints and their delivery log (admins only): serializers, then thin views. The
rules are in webhooks.services."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, paginate, valid
from api.pagination import paginated
from core.errors import NotFound
from webhooks import services
from webhooks.models import Delivery, Endpoint, Event


class WebhookIn(StrictInput):
    url = StrictCharField(max_length=2000, trim_whitespace=False)
    events = serializers.ListField(child=serializers.ChoiceField(choices=Event.values), allow_empty=False)
    tools = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=100,
        help_text="Tool names: the tool events (tool.*) reach this endpoint only for these; empty: every tool.",
    )
    description = StrictCharField(required=False, allow_blank=True, max_length=1000, trim_whitespace=False)
    active = serializers.BooleanField(required=False, help_text="Default true; false registers it switched off.")


class RotateSecretIn(StrictInput):
    overlap_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=services.MAX_OVERLAP_SECONDS,
        help_text="How long the old secret keeps signing too (default 86400; 0: retire it at once).",
    )


class WebhookPatchIn(StrictInput):
    url = StrictCharField(required=False, max_length=2000, trim_whitespace=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=Event.values), allow_empty=False, required=False
    )
    tools = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=100,
        help_text="Tool names: the tool events (tool.*) reach this endpoint only for these; empty: every tool.",
    )
    description = StrictCharField(required=False, allow_blank=True, max_length=1000, trim_whitespace=False)
    active = serializers.BooleanField(required=False)


class WebhookOut(serializers.ModelSerializer):
    class Meta:
        model = Endpoint
        fields = [
            "id",
            "url",
            "events",
            "tools",
            "description",
            "active",
            "created_at",
            "created_by",
            "disabled_at",
            "disabled_reason",
            "previous_secret_expires_at",
        ]


class WebhookCreatedOut(WebhookOut):
    secret = serializers.SerializerMethodField(help_text="The signing secret (whsec_...), shown only in this answer.")

    class Meta(WebhookOut.Meta):
        fields = [*WebhookOut.Meta.fields, "secret"]

    def get_secret(self, obj: Endpoint) -> str:
        return self.context["secret"]


class DeliveryOut(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = [
            "id",
            "event",
            "message_id",
            "payload",
            "status",
            "attempts",
            "response_status",
            "latency_ms",
            "error",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
            "delivered_at",
        ]


def _endpoint(pk: int) -> Endpoint:
    try:
        return Endpoint.objects.get(pk=pk)
    except Endpoint.DoesNotExist:
        raise NotFound("No such webhook endpoint.") from None


class WebhookListApi(BaseApi):
    roles = {"GET": Role.ADMIN, "POST": Role.ADMIN}

    @extend_schema(operation_id="webhooks_list", summary="List webhook endpoints", responses=paginated(WebhookOut))
    def get(self, request: Request) -> Response:
        return paginate(self, request, Endpoint.objects.all(), WebhookOut, "pk")

    @extend_schema(
        summary="Register a webhook endpoint (the answer carries its secret, once)",
        request=WebhookIn,
        responses={201: WebhookCreatedOut},
    )
    def post(self, request: Request) -> Response:
        data = valid(WebhookIn, request)
        endpoint, secret = services.endpoint_create(actor=actor_of(request), **data)
        return Response(WebhookCreatedOut(endpoint, context={"secret": secret}).data, status=201)


class WebhookDetailApi(BaseApi):
    roles = {"GET": Role.ADMIN, "PATCH": Role.ADMIN, "DELETE": Role.ADMIN}

    @extend_schema(summary="One webhook endpoint", responses=WebhookOut)
    def get(self, request: Request, webhook_id: int) -> Response:
        return Response(WebhookOut(_endpoint(webhook_id)).data)

    @extend_schema(
        summary="Change an endpoint's url, events, tools, description or active flag",
        request=WebhookPatchIn,
        responses=WebhookOut,
    )
    def patch(self, request: Request, webhook_id: int) -> Response:
        endpoint = _endpoint(webhook_id)
        data = valid(WebhookPatchIn, request)
        return Response(
            WebhookOut(services.endpoint_update(endpoint=endpoint, actor=actor_of(request), changes=data)).data
        )

    @extend_schema(summary="Delete an endpoint and its delivery log", responses={204: OpenApiResponse()})
    def delete(self, request: Request, webhook_id: int) -> Response:
        services.endpoint_delete(endpoint=_endpoint(webhook_id), actor=actor_of(request))
        return Response(status=204)


class WebhookRotateSecretApi(BaseApi):
    roles = {"POST": Role.ADMIN}

    @extend_schema(
        summary="Rotate an endpoint's signing secret (the answer carries the new one, once)",
        description=(
            "A new secret signs every delivery from now on; during the overlap the old one signs too "
            "(two signatures in webhook-signature), so the receiver can switch at its own pace."
        ),
        request=RotateSecretIn,
        responses={200: WebhookCreatedOut},
    )
    def post(self, request: Request, webhook_id: int) -> Response:
        endpoint = _endpoint(webhook_id)
        data = valid(RotateSecretIn, request)
        endpoint, secret = services.endpoint_rotate_secret(endpoint=endpoint, actor=actor_of(request), **data)
        return Response(WebhookCreatedOut(endpoint, context={"secret": secret}).data)


class WebhookDeliveryListApi(BaseApi):
    roles = {"GET": Role.ADMIN}

    @extend_schema(
        operation_id="webhook_deliveries_list",
        summary="The endpoint's delivery log, newest first",
        responses=paginated(DeliveryOut),
    )
    def get(self, request: Request, webhook_id: int) -> Response:
        return paginate(self, request, _endpoint(webhook_id).deliveries.all(), DeliveryOut, "-pk")


class WebhookRedeliverApi(BaseApi):
    roles = {"POST": Role.ADMIN}

    @extend_schema(
        summary="Send a delivery again now (same webhook-id, fresh retry budget)", request=None, responses=DeliveryOut
    )
    def post(self, request: Request, webhook_id: int, delivery_id: int) -> Response:
        try:
            delivery = _endpoint(webhook_id).deliveries.get(pk=delivery_id)
        except Delivery.DoesNotExist:
            raise NotFound("No such delivery.") from None
        return Response(DeliveryOut(services.delivery_redeliver(delivery=delivery, actor=actor_of(request))).data)
