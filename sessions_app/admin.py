"""Sessions in the admin: the stock pages, read-only. adminui registers its searchable list
and detail page (where ops can end a session) on top of these (adminui/admin.py)."""

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from sessions_app.models import Session

# django-stubs makes ModelAdmin generic; at run time it is a plain class (no django_stubs_ext here).
if TYPE_CHECKING:
    _Admin = admin.ModelAdmin[Session]
else:
    _Admin = admin.ModelAdmin


@admin.register(Session)
class SessionAdmin(_Admin):
    list_display = ["id", "bundle", "version", "label", "status", "started_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["id", "external_id", "bundle__name"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
