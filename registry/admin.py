"""The registry in the admin: the stock model pages, read-only. The pages people work with
(bundles, writing a version, diffs, label moves and rollbacks, history, the drain dashboard)
belong to adminui, which registers them itself (adminui/admin.py) on top of these.

Published versions have no change or delete permission here, and the database refuses
changes to their content anyway (migration 0002)."""

from django.contrib import admin

from registry.models import Bundle, BundleVersion, Label


@admin.register(Bundle)
class BundleAdmin(admin.ModelAdmin):
    """The bundle list (adminui replaces it with its own pages)."""

    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]

    def has_change_permission(self, request, obj=None):
        return False  # no service changes a bundle; the stock form would write around them

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BundleVersion)
class BundleVersionAdmin(admin.ModelAdmin):
    """Read-only: a POST to the change page (or to the delete page) is refused by the stock admin
    because there is no change or delete permission."""

    list_display = ["bundle", "number", "state", "author", "created_at", "drained_at"]
    list_filter = ["state"]
    list_select_related = ["bundle"]
    exclude = ["canonical"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("canonical")

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in BundleVersion._meta.fields if f.name != "canonical"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin):
    """Read-only list. A plain ModelAdmin on purpose: SimpleHistoryAdmin's "revert" page saves
    a POSTed form for anyone with view permission, which would move a label around
    label_move (no reason, no role check, no drain). History is the adminui history page."""

    list_display = ["bundle", "name", "version", "protected", "compatibility", "updated_at", "updated_by"]
    list_filter = ["compatibility", "protected"]
    list_select_related = ["bundle", "version"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("version__canonical")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
