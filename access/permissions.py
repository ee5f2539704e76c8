"""The two checks every service makes before it writes: the actor's role, and its key's
bundle scope. Services call them (they are the one place a rule is enforced); the API may
call the same functions earlier, so that a refusal still comes before a validation error."""

from access.actors import Actor
from core.errors import Forbidden, NotFound

# What every refusal for the key's role says, in both HTTP lanes (api.permissions.RolePermission
# for the DRF views, the domain's Forbidden elsewhere), so the two answers are the same bytes.
ROLE_REFUSED = "Your key's role does not allow this."


def require_role(actor: Actor, role: str, doing: str) -> None:
    """Forbidden unless `actor` has `role` or a higher one; `doing` names the action."""
    if not actor.has_role(role):
        raise Forbidden(f"{doing} needs the {role} role.")


def require_bundle_scope(actor: Actor, bundle_name: str) -> None:
    """NotFound unless the actor's key may see the bundle: the same answer the API gives for a
    bundle that does not exist, so a scoped key cannot learn that other bundles exist."""
    if not actor.may_see_bundle(bundle_name):
        raise NotFound(f"No bundle named {bundle_name!r}.")


def require_packs_in_scope(actor: Actor, names: list[str], *, field: str = "content.knowledge") -> None:
    """Forbidden unless the actor's key may see every knowledge pack in `names` (a version's
    `knowledge` list). Key scopes name packs as they name bundles; the answer depends on the
    names alone, so it says nothing about whether such a pack exists."""
    outside = {
        f"{field}[{i}]": [f"Pack {name!r} is outside this key's scopes."]
        for i, name in enumerate(names)
        if not actor.may_see_bundle(name)
    }
    if outside:
        raise Forbidden(f"Your key may only list knowledge packs matching {', '.join(actor.scopes)}.", outside)
