"""Knowledge packs in the admin: the stock model pages are replaced by the pages in
adminui.pack_pages (packs, their manifest and files, which bundles use them), mounted here.
In adminui, not knowledge/admin.py: the admin is an entry point above the apps, and knowledge
sits below it (docs/architecture.md).

Anyone who may use the admin may open them; what a person may change is their role's, checked
by knowledge.services (a prompt engineer writes files, a reader only reads)."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import path

from adminui import pack_pages as adminpages
from adminui.groups import may_use_admin
from knowledge.models import Pack


@admin.register(Pack)
class PackAdmin(admin.ModelAdmin):
    def get_urls(self):
        def page(view, route: str, name: str):
            return path(route, self.admin_site.admin_view(adminpages.page(view, self)), name=name)

        return [
            page(adminpages.pack_detail, "<str:name>/files/", "knowledge_pack"),
            page(adminpages.file_edit, "<str:name>/file/", "knowledge_file"),
            page(adminpages.file_delete, "<str:name>/file/delete/", "knowledge_file_delete"),
        ] + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        return adminpages.page(adminpages.pack_list, self)(request)

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None) -> HttpResponse:
        return adminpages.page(adminpages.pack_list, self)(request)

    # Model permissions would need new group grants; the admin's groups are enough to look,
    # and the services decide every write by role.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return may_use_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return may_use_admin(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return may_use_admin(request.user)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
