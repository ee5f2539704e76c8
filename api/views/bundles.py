"""Bundles: the list and one bundle, the capability catalog, who may pin any version, and the
bundles that include one (registry.includes). Their serializers, then their views."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.common import BaseApi, IdentifierField, StrictCharField, StrictInput, paginate, valid
from api.pagination import Cursor, paginated
from core import limits
from registry import selectors as registry_selectors
from registry import services as registry_services
from registry.lifecycle import pin_policy
from registry.selectors import bundle_label_map


class BundleIn(StrictInput):
    name = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    description = StrictCharField(required=False, allow_blank=True, max_length=limits.TEXT_MAX_CHARS, default="")
    when_to_use = StrictCharField(required=False, allow_blank=True, max_length=limits.TEXT_MAX_CHARS, default="")


class CatalogEntryOut(serializers.Serializer):
    """A bundle as the capability catalog shows it; BundleOut adds the registry's own fields."""

    name = serializers.CharField()
    description = serializers.CharField()
    when_to_use = serializers.CharField()
    labels = serializers.SerializerMethodField()

    def get_labels(self, bundle) -> dict[str, int]:
        return bundle_label_map(bundle)


class BundleOut(CatalogEntryOut):
    latest_version = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class PinPolicyIn(StrictInput):
    """PUT of a bundle's pin policy: who may pin any version by number, and a reason."""

    pin_any_version = serializers.ListField(
        child=StrictCharField(max_length=210), max_length=pin_policy.PIN_GRANTS_MAX, allow_empty=True
    )
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class PinPolicyOut(serializers.Serializer):
    bundle = serializers.CharField(source="name")
    pin_any_version = serializers.ListField(child=serializers.CharField())


class DependentOut(serializers.Serializer):
    """A bundle whose latest version includes this one (registry.includes)."""

    bundle = serializers.CharField()
    version = serializers.IntegerField(help_text="The including bundle's latest version.")
    marker = serializers.CharField(help_text="The marker as written, e.g. {{> tone@production}}.")
    pinned_version = serializers.IntegerField(help_text="The version of this bundle it resolved to at its publish.")
    pinned_hash = serializers.CharField(help_text="That version's content hash.")
    current_version = serializers.IntegerField(
        allow_null=True, help_text="What the marker names now (null: nothing, its next publish would fail)."
    )
    outdated = serializers.BooleanField(help_text="Its next publish would pick up other bytes.")


DEPENDENTS_HELP = f"The first {limits.DEPENDENTS_MAX} by including bundle name (GET .../dependents/ pages them all)."


DEPENDENTS_TOTAL_HELP = "How many dependents there are in all: more than `dependents` lists when truncated."


class DependentListOut(serializers.Serializer):
    bundle = serializers.CharField()
    results = DependentOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page (cursor), or null on the last.")


class BundleListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="List bundles",
        description=(
            "The bundles this key may see (all, or those matching its scope), by name, with their labels and "
            "latest version number. Paged by cursor."
        ),
        operation_id="bundles_list",
        responses=paginated(BundleOut),
    )
    def get(self, request: Request) -> Response:
        return paginate(
            self, request, registry_selectors.bundles_with_labels(actor=actor_of(request)), BundleOut, "name"
        )

    @extend_schema(
        summary="Create a bundle",
        description=(
            "Publisher role. 201 with the bundle; 409 `conflict` if the name exists; 403 when the name is "
            "outside the key's scope. The name never changes afterwards."
        ),
        request=BundleIn,
        responses={201: BundleOut},
    )
    def post(self, request: Request) -> Response:
        data = valid(BundleIn, request)
        bundle = registry_services.bundle_create(
            name=data["name"], description=data["description"], when_to_use=data["when_to_use"], actor=actor_of(request)
        )
        bundle = registry_selectors.bundles_with_labels(actor=actor_of(request)).get(pk=bundle.pk)
        return Response(BundleOut(bundle).data, status=201)


class BundleDetailApi(BaseApi):
    @extend_schema(
        summary="Get a bundle",
        description=(
            "One bundle: description, when to use it, its labels (`{label: version}`) and latest version number."
        ),
        responses=BundleOut,
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundles_with_labels(actor=actor_of(request)).filter(name=name).first()
        if bundle is None:
            registry_selectors.bundle_get(name=name, actor=actor_of(request))  # raises the contract's 404
        return Response(BundleOut(bundle).data)


class CatalogApi(BaseApi):
    """What this key may start sessions on, derived from the key alone (the client never says who it is)."""

    @extend_schema(
        summary="Capability catalog",
        description=(
            "The bundles this key may start sessions on (in its scope, with at least one label), each with "
            "its description, when to use it and its labels, derived from the key alone. Paged by cursor."
        ),
        operation_id="catalog_list",
        responses=paginated(CatalogEntryOut),
    )
    def get(self, request: Request) -> Response:
        return paginate(self, request, registry_selectors.catalog(actor=actor_of(request)), CatalogEntryOut, "name")


class BundlePinPolicyApi(BaseApi):
    """GET or PUT (ops) who may pin any version of the bundle by number."""

    roles = {"PUT": Role.OPS}

    @extend_schema(
        summary="Who may pin any version",
        description=(
            "`pin_any_version`: the grants (`role:ROLE`, `key:NAME`) whose keys may start a session on any "
            "version by number, even one that has not passed the bundle's labels' required checks and "
            "approvals (docs/releases.md, Pins by number)."
        ),
        responses=PinPolicyOut,
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(PinPolicyOut(registry_selectors.bundle_get(name=name, actor=actor_of(request))).data)

    @extend_schema(
        summary="Grant pins of any version",
        description=(
            "Ops role. Replaces `pin_any_version` (at most 20 grants, each `role:ROLE` or `key:NAME`), with a "
            "required reason; audited (`bundle.pin_policy_changed`, with the grants before and after)."
        ),
        request=PinPolicyIn,
        responses=PinPolicyOut,
    )
    def put(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        data = valid(PinPolicyIn, request)
        bundle = registry_services.bundle_pin_policy_set(
            bundle=bundle, pin_any_version=data["pin_any_version"], actor=actor_of(request), reason=data["reason"]
        )
        return Response(PinPolicyOut(bundle).data)


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
