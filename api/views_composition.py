"""Thin REST view of composition (registry.includes): which bundles include a bundle."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.serializers import DependentListOut
from api.views import BaseApi
from registry import selectors as registry_selectors


class BundleDependentsApi(BaseApi):
    @extend_schema(
        summary="Bundles that include this one",
        description=(
            "The bundles in the key's scope whose latest version includes this bundle's prompt, one entry per "
            "marker: the version it is pinned to, what the marker names now, and whether its next publish would "
            "pick up other bytes (`outdated`). Published versions never change: only a new publish moves."
        ),
        responses=DependentListOut,
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        results = registry_selectors.bundles_including(bundle_name=bundle.name, actor=actor_of(request))
        return Response(DependentListOut({"bundle": bundle.name, "results": results}).data)
