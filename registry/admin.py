"""The registry in the admin: the stock model pages, read-only. The pages people work with
(bundles, writing a version, diffs, label moves and rollbacks, history, the drain dashboard)
belong to adminui, which registers them itself (adminui/admin.py) on top of these.

Published versions have no change or delete permission here, and the database refuses
changes to their content anyway (migration 0002)."""

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from registry.models import Bundle, BundleVersion, Label

# django-stubs makes ModelAdmin generic; at run time it is a plain class (no django_stubs_ext here).
if TYPE_CHECKING:
    _BundleAdmin = admin.ModelAdmin[Bundle]
    _VersionAdmin = admin.ModelAdmin[BundleVersion]
    _LabelAdmin = admin.ModelAdmin[Label]
else:
    _BundleAdmin = admin.ModelAdmin
    _VersionAdmin = admin.ModelAdmin
    _LabelAdmin = admin.ModelAdmin


@admin.register(Bundle)
class BundleAdmin(_BundleAdmin):
    """The bundle list (adminui replaces it with its own pages)."""

    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # no service changes a bundle; the stock form would write around them

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(BundleVersion)
class BundleVersionAdmin(_VersionAdmin):
    """Read-only: a POST to the change page (or to the delete page) is refused by the stock admin
    because there is no change or delete permission."""

    list_display = ["bundle", "number", "state", "author", "created_at", "drained_at"]
    list_filter = ["state"]
    list_select_related = ["bundle"]
    exclude = ["canonical"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[BundleVersion]:
        return super().get_queryset(request).defer("canonical")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in BundleVersion._meta.fields if f.name != "canonical"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Label)
class LabelAdmin(_LabelAdmin):
    """Read-only list. A plain ModelAdmin on purpose: SimpleHistoryAdmin's "revert" page saves
    a POSTed form for anyone with view permission, which would move a label around
    label_move (no reason, no role check, no drain). History is the adminui history page."""

    list_display = ["bundle", "name", "version", "protected", "compatibility", "updated_at", "updated_by"]
    list_filter = ["compatibility", "protected"]
    list_select_related = ["bundle", "version"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Label]:
        return super().get_queryset(request).defer("version__canonical")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
