"""The model catalog over HTTP (docs/api.md#models): the list, ops' corrections, the retiring
view, and derive (a version moved to another model in one step). Serializers, then thin views:
each checks its input's shape and calls one selector or service."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, StrictCharField, StrictInput, valid
from api.views.versions import PublishOut
from core import limits
from core.errors import InvalidContent, NotFound
from modelcatalog import selectors as catalog
from modelcatalog import services as catalog_services
from registry import derive
from registry import selectors as registry_selectors


class ModelListOut(serializers.Serializer):
    results = serializers.ListField(
        child=serializers.JSONField(),
        help_text=(
            "Every model: provider, name, aliases, context_window, output_limit, cache_floor_tokens, the four "
            "prices (USD per million tokens), deprecated_at, retires_at, replacement, retired, sources "
            "({fact: {url, read}}), overridden."
        ),
    )


class ModelPutIn(serializers.Serializer):
    """The PUT body, for the OpenAPI document (a serializer field cannot be called `source`, so
    the view hands the body to modelcatalog.services.model_put, which checks every field)."""

    facts = serializers.JSONField(help_text="Any of the model's facts; null makes one unknown.")
    reason = serializers.CharField(max_length=limits.TEXT_MAX_CHARS)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["source"] = serializers.JSONField(help_text='Where the facts were read: {"url", "read": "YYYY-MM-DD"}.')
        return fields


PUT_FIELDS = frozenset({"facts", "source", "reason"})


class DeriveIn(StrictInput):
    model = serializers.JSONField(help_text="The new model settings, laid over the version's (null removes one).")
    message = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class ModelListApi(BaseApi):
    @extend_schema(
        operation_id="models_list",
        summary="The model catalog",
        description=(
            "Every model the registry knows, with each fact's source (URL and the date it was read): the shipped "
            "table (modelcatalog/data.py) with ops' corrections over it."
        ),
        responses=ModelListOut,
    )
    def get(self, request: Request) -> Response:
        return Response({"results": [m.as_dict() for m in catalog.model_list()]})


class ModelDetailApi(BaseApi):
    roles = {"PUT": Role.OPS}

    @extend_schema(
        operation_id="models_get",
        summary="One model of the catalog",
        description="One model by its catalog provider and name (not an alias), with each fact's source.",
        responses=OpenApiResponse(description="The model"),
    )
    def get(self, request: Request, provider: str, name: str) -> Response:
        found = catalog.model_exact(provider=provider, name=name)
        if found is None:
            raise NotFound(f"The catalog has no model {provider}/{name}.")
        return Response(found.as_dict())

    @extend_schema(
        summary="Correct or extend the catalog",
        description=(
            "Ops role. Sets the given `facts` of the model (adding it when the catalog lacks it) with the `source` "
            "they were read from and a required `reason`, recorded in the audit log (`model.updated`). Takes "
            "effect at once in this process and within MODEL_CATALOG_CACHE_SECONDS in the others."
        ),
        request=ModelPutIn,
        responses=OpenApiResponse(description="The model as the catalog now knows it"),
    )
    def put(self, request: Request, provider: str, name: str) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise InvalidContent("Send a JSON object.", {"body": ["Expected a JSON object."]})
        unknown = sorted(set(data) - PUT_FIELDS)[:20]
        if unknown:
            raise InvalidContent("Unknown fields.", {name: ["Unknown field."] for name in unknown})
        info = catalog_services.model_put(
            provider=provider,
            name=name,
            facts=data.get("facts"),
            source=data.get("source"),
            reason=data.get("reason"),
            actor=actor_of(request),
        )
        return Response(info.as_dict())


class ModelRetiringApi(BaseApi):
    roles = {"GET": Role.OPS}

    @extend_schema(
        summary="Models retiring, and who uses them",
        description=(
            "Ops role. Each model that retires within `within` (default 30d; `12h`, `90d`, at most 3650d), or "
            "has retired and is still used, soonest first, with every live or draining version (of the bundles "
            "in the key's scope) that names it: the labels targeting it and its active sessions (exact up to "
            "SESSION_COUNT_EXACT_LIMIT, then the last sweep's tally)."
        ),
        parameters=[OpenApiParameter("within", str, description="30d (default), 12h, ...")],
        responses=OpenApiResponse(description="{within, models: [...]}"),
    )
    def get(self, request: Request) -> Response:
        raw: Any = request.query_params.get("within", "30d")
        within = catalog.parse_window(raw)
        found = registry_selectors.models_retiring_usage(within=within, actor=actor_of(request))
        return Response({"within": raw, "models": found})


class VersionDeriveApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Derive a version on another model",
        description=(
            "Publisher role. Publishes a new version equal to version `n` except its model settings: `model` laid "
            "over the version's (a setting given as null is removed; settings only the old model's provider takes "
            "are dropped when the provider changes, each with a note). Checked and classified like any publish "
            "(400 model_retired for a retired target model). 201 with the version, `derived_from` and `notes`; "
            "200 when that content exists already."
        ),
        request=DeriveIn,
        responses={201: PublishOut, 200: PublishOut},
    )
    def post(self, request: Request, name: str, number: int) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(DeriveIn, request)
        result = derive.version_derive(
            bundle=bundle, number=number, model=data["model"], message=data["message"], actor=actor_of(request)
        )
        published = result.published
        version = registry_selectors.version_get(bundle=bundle, number=published.version.number)
        context = {"warnings": published.warnings, "model": published.model, "dependents": [], "dependents_total": 0}
        answer = dict(PublishOut(version, context=context).data)
        answer["derived_from"] = result.source.number
        answer["notes"] = result.notes
        response = Response(answer, status=201 if published.created else 200)
        response["ETag"] = f'"{version.content_hash}"'
        return response
