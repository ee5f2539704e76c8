from datetime import datetime
from typing import Protocol

from django.db.models import QuerySet

from audit.models import AuditEvent


class Scoped(Protocol):
    """A caller whose bundle scopes filter the events: access.actors.Actor (audit sits below
    access, so it asks only for the scopes as a regular expression)."""

    def scope_regex(self, *, then: str = "") -> str | None: ...


def audit_events(
    *,
    actor_scope: Scoped | None = None,
    action: str | None = None,
    actor: str | None = None,
    target_type: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """Audit events, filtered; `target` matches a prefix, so `refunds` finds `refunds@3`.

    A key scoped to some bundles sees only events about those bundles (targets `name`,
    `name@n`, `name:label`) and packs of the same names; events about keys and sessions name
    no bundle, so it sees none."""
    events = AuditEvent.objects.all()
    pattern = actor_scope.scope_regex(then=r"([@:].*)?") if actor_scope is not None else None
    if pattern is not None:
        events = events.filter(target_type__in=["bundle", "version", "label", "pack"], target__regex=pattern)
    if action:
        events = events.filter(action=action)
    if actor:
        events = events.filter(actor=actor)
    if target_type:
        events = events.filter(target_type=target_type)
    if target:
        events = events.filter(target__startswith=target)
    if since:
        events = events.filter(at__gte=since)
    if until:
        events = events.filter(at__lt=until)
    return events
