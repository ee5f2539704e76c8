"""The model catalog's tables in the admin, read-only: every change goes through
modelcatalog.services (audited). The pages people work with, the catalog with its edit form
and the retiring dashboard, are adminui's (adminui/models_pages.py)."""

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from modelcatalog.models import ModelOverride, RetirementNotice

if TYPE_CHECKING:
    _OverrideAdmin = admin.ModelAdmin[ModelOverride]
    _NoticeAdmin = admin.ModelAdmin[RetirementNotice]
else:
    _OverrideAdmin = admin.ModelAdmin
    _NoticeAdmin = admin.ModelAdmin


class _ReadOnly:
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ModelOverride)
class ModelOverrideAdmin(_ReadOnly, _OverrideAdmin):
    """Ops' overrides of the shipped catalog (the audit log has who changed what, and why)."""

    list_display = ["provider", "name", "facts", "updated_at", "updated_by"]
    search_fields = ["name"]


@admin.register(RetirementNotice)
class RetirementNoticeAdmin(_ReadOnly, _NoticeAdmin):
    """The retirement webhooks already emitted, one per model, date and threshold."""

    list_display = ["provider", "name", "retires_at", "threshold", "sent_at"]
    list_filter = ["threshold"]
