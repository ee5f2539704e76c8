from dataclasses import dataclass

from access.models import ROLE_RANK, Role


@dataclass(frozen=True)
class Actor:
    """Who performs an action: an API key, a person in the admin, or a system process.

    Services take an Actor so that the API, the admin and management commands apply the same
    rules; `name` is what authorship and history fields record."""

    name: str
    role: str
    api_key_id: int | None = None

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]


SYSTEM = Actor(name="system", role=Role.ADMIN)
