from typing import TYPE_CHECKING

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from access.models import Role
from access.permissions import ROLE_REFUSED
from api.authentication import request_actor

if TYPE_CHECKING:  # DRF loads this module while rest_framework.views is still importing
    from rest_framework.views import APIView


class RolePermission(BasePermission):
    """Needs a key whose role is at least the view's `roles[method]` (agent when unlisted)."""

    message = ROLE_REFUSED

    def has_permission(self, request: Request, view: "APIView") -> bool:
        actor = request_actor(request)
        if actor is None:
            return False
        needed = getattr(view, "roles", {}).get(request.method, Role.AGENT)
        return actor.has_role(needed)
