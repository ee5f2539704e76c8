from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEvent

# django-stubs makes ModelAdmin generic; at run time it is a plain class (no django_stubs_ext here).
if TYPE_CHECKING:
    _Admin = admin.ModelAdmin[AuditEvent]
else:
    _Admin = admin.ModelAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(_Admin):
    list_display = ["at", "actor", "action", "target", "reason", "request_id", "client_ip"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor", "target", "request_id", "reason"]
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
