"""A minimal, read-only admin for now; publishing in the admin comes with the admin UI issue.

Published versions have no change or delete permission here, and the database refuses
changes to their content anyway (migration 0002)."""

import json

from django.contrib import admin
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from registry.models import Bundle, BundleVersion, Label


@admin.register(Bundle)
class BundleAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BundleVersion)
class BundleVersionAdmin(admin.ModelAdmin):
    list_display = ["bundle", "number", "state", "author", "created_at", "drained_at"]
    list_filter = ["state"]
    exclude = ["canonical"]
    readonly_fields = ["content_pretty"]

    @admin.display(description="content")
    def content_pretty(self, obj: BundleVersion) -> str:
        text = json.dumps(json.loads(bytes(obj.canonical)), indent=2, ensure_ascii=False)
        return format_html("<pre>{}</pre>", text)

    def get_readonly_fields(self, request, obj=None):
        return ["content_pretty"] + [f.name for f in BundleVersion._meta.fields if f.name != "canonical"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Label)
class LabelAdmin(SimpleHistoryAdmin):
    list_display = ["bundle", "name", "version", "protected", "updated_at", "updated_by"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
