from datetime import datetime

from django.db.models import QuerySet

from audit.models import AuditEvent


def audit_events(
    *,
    action: str | None = None,
    actor: str | None = None,
    target_type: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """Audit events, filtered; `target` matches a prefix, so `refunds` finds `refunds@3`."""
    events = AuditEvent.objects.all()
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
