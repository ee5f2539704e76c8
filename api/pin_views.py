"""Who may pin any version of a bundle by number (docs/releases.md, Pins by number). Thin: the
rule lives in registry.lifecycle.pin_policy, the write in registry.services."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.authentication import actor_of
from api.serializers import PinPolicyIn, PinPolicyOut
from api.views import BaseApi, _valid
from registry import selectors as registry_selectors
from registry import services as registry_services


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
        data = _valid(PinPolicyIn, request)
        bundle = registry_services.bundle_pin_policy_set(
            bundle=bundle, pin_any_version=data["pin_any_version"], actor=actor_of(request), reason=data["reason"]
        )
        return Response(PinPolicyOut(bundle).data)
