import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from access.groups import ROLE_OF_GROUP
from access.roles import ROLE_RANK, Role


@dataclass(frozen=True)
class Actor:
    """Who performs an action: an API key, a person in the admin, or a system process.

    Services take an Actor so that the API, the admin and management commands apply the same
    rules; `name` is what authorship and history fields record. `scopes` are bundle-name
    patterns (`support-*`); empty means every bundle."""

    name: str
    role: str
    api_key_id: int | None = None
    scopes: tuple[str, ...] = ()
    # The first key of this key's rotation lineage (ApiKey.lineage_id); None: the key itself.
    lineage_id: int | None = None

    @classmethod
    def for_key(
        cls, *, key_id: int, name: str, role: str, scopes: Iterable[str] | None, lineage_id: int | None = None
    ) -> "Actor":
        """The Actor of an API key: the one place that says how a key appears in authorship."""
        return cls(name=f"key:{name}", role=role, api_key_id=key_id, scopes=tuple(scopes or ()), lineage_id=lineage_id)

    @property
    def owner_key_id(self) -> int | None:
        """Whose sessions this key's are: the first key of its rotation lineage, so that a key
        and every key rotated from it (during a grace period, both) own the same sessions."""
        return self.lineage_id or self.api_key_id

    def owns(self, owner_key_id: int | None) -> bool:
        """Whether a session stored with `owner_key_id` (Session.api_key_id) is this key's: stored
        under its lineage (what this release writes), or under the key itself (what the previous
        release writes, also during a rolling upgrade; a rotation moves those to the lineage)."""
        return owner_key_id is not None and owner_key_id in (self.api_key_id, self.owner_key_id)

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def may_see_bundle(self, name: str) -> bool:
        return not self.scopes or any(fnmatchcase(name, pattern) for pattern in self.scopes)

    def scope_regex(self, *, then: str = "") -> str | None:
        """The scopes as one PostgreSQL regular expression (None: no restriction), so that lists
        are filtered in the database; `then` is appended after the bundle name (a regex).
        Patterns know only `*` and `?`."""
        if not self.scopes:
            return None
        parts = ["".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in p) for p in self.scopes]
        return "^(" + "|".join(parts) + ")" + then + "$"


SYSTEM = Actor(name="system", role=Role.ADMIN)


def actor_for_user(user: Any) -> Actor:
    """The Actor for a person signed in to the admin, so the admin calls services with the
    same role checks as the API. Superusers are admins; then the group "Ops" gives ops and
    "Prompt engineers" gives publisher; any other staff user only reads (agent)."""
    role: str
    if user.is_superuser:
        role = Role.ADMIN
    else:
        groups = set(user.groups.values_list("name", flat=True))
        role = next((r for name, r in ROLE_OF_GROUP.items() if name in groups), Role.AGENT)
    return Actor(name=f"user:{user.username}", role=role)
