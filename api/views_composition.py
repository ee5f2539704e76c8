"""Thin REST view of composition (registry.includes): which bundles include a bundle."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.authentication import actor_of
from api.pagination import Cursor
from api.serializers import DependentListOut
from api.views import BaseApi
from registry import selectors as registry_selectors


class BundleDependentsApi(BaseApi):
    @extend_schema(
        summary="Bundles that include this one",
        description=(
            "The bundles in the key's scope whose latest version includes this bundle's prompt, one entry per "
            "marker, by including bundle name: the version it is pinned to, what the marker names now, and whether "
            "its next publish would pick up other bytes (`outdated`). Published versions never change: only a new "
            "publish moves. Paged by cursor (`next`)."
        ),
        responses=DependentListOut,
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        paginator = Cursor()
        # (including bundle name, marker position) is a total order: a bundle's latest version
        # has one edge per position, so the cursor never skips or repeats an entry.
        paginator.ordering = ("including", "position")  # type: ignore[assignment]  # DRF takes a tuple
        edges = registry_selectors.dependents(bundle_name=bundle.name, actor=actor_of(request))
        page = paginator.paginate_queryset(edges, request, view=self)
        results = [registry_selectors.dependent_entry(edge) for edge in page or []]
        answer = {"bundle": bundle.name, "results": results, "next": paginator.get_next_link()}
        return Response(DependentListOut(answer).data)
