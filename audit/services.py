from typing import Any, Protocol

from audit import context
from audit.models import AuditEvent


class Author(Protocol):
    """Who an audit row names: access.actors.Actor (audit sits below access, so it asks only
    for what it records)."""

    @property
    def name(self) -> str: ...


def audit_record(
    *, actor: Author, action: str, target_type: str, target: str, reason: str = "", data: dict[str, Any] | None = None
) -> AuditEvent:
    """Append one audit row; call it inside the transaction of the change it records, so the
    two commit or roll back together. `data` holds ids, numbers and hashes, never content."""
    ctx = context.current.get()
    return AuditEvent.objects.create(
        actor=actor.name,
        action=action,
        target_type=target_type,
        target=target,
        reason=reason,
        data=data or {},
        request_id=ctx.request_id,
        client_ip=ctx.client_ip,
    )
