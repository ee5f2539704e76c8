"""Sessions in the admin: the stock pages, read-only. adminui registers its searchable list
and detail page (where ops can end a session) on top of these (adminui/admin.py)."""

from django.contrib import admin

from sessions_app.models import Session


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ["id", "bundle", "version", "label", "status", "started_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["id", "external_id", "bundle__name"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
