from rest_framework.permissions import BasePermission

from access.models import Role


class RolePermission(BasePermission):
    """Needs a key whose role is at least the view's `roles[method]` (agent when unlisted)."""

    message = "Your key's role does not allow this."

    def has_permission(self, request, view) -> bool:
        actor = request.auth
        if actor is None:
            return False
        needed = getattr(view, "roles", {}).get(request.method, Role.AGENT)
        return actor.has_role(needed)
