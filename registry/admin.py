"""The registry in the admin: the stock model pages are read-only, and the pages people
work with (bundles, writing a version, diffs, label moves and rollbacks, history, the drain
dashboard) are adminui views mounted here through get_urls(). Every write they make goes
through registry.services with the signed-in person's Actor.

Published versions have no change or delete permission here, and the database refuses
changes to their content anyway (migration 0002)."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse

from adminui import views
from registry.models import Bundle, BundleVersion, Label


@admin.register(Bundle)
class BundleAdmin(admin.ModelAdmin):
    """The bundle list and the adminui pages, all under /admin/registry/bundle/."""

    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]

    def get_urls(self):
        def page(view, route: str, name: str):
            return path(route, self.admin_site.admin_view(views.page(view, self)), name=name)

        # Before the stock patterns: "<name>/history/" replaces the stock object history.
        return [
            page(views.drain_dashboard, "drain/", "adminui_drain"),
            page(views.drain_json, "drain.json", "adminui_drain_json"),
            page(views.bundle_overview, "<str:name>/versions/", "adminui_bundle"),
            page(views.bundle_edit, "<str:name>/edit/", "adminui_bundle_edit"),
            page(views.version_new, "<str:name>/versions/new/", "adminui_version_new"),
            page(views.version_detail, "<str:name>/versions/<int:number>/", "adminui_version"),
            page(views.version_revoke, "<str:name>/versions/<int:number>/revoke/", "adminui_revoke"),
            page(views.version_diff, "<str:name>/diff/", "adminui_diff"),
            page(views.label_move, "<str:name>/move/", "adminui_move"),
            page(views.label_rollback, "<str:name>/labels/<str:label>/rollback/", "adminui_rollback"),
            page(views.bundle_history, "<str:name>/history/", "adminui_history"),
        ] + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        return views.page(views.bundle_list, self)(request)

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None) -> HttpResponse:
        return views.page(views.bundle_add, self)(request)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        bundle = Bundle.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if request.method == "GET" and bundle is not None:
            return HttpResponseRedirect(reverse("admin:adminui_bundle", args=[bundle.name]))
        return super().change_view(request, object_id, form_url, extra_context)

    def has_change_permission(self, request, obj=None):
        return False  # no service changes a bundle; the stock form would write around them

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BundleVersion)
class BundleVersionAdmin(admin.ModelAdmin):
    """Read-only. GET of the stock change page goes to the version page; a POST to it (or to
    the delete page) is refused by the stock admin because there is no change or delete permission."""

    list_display = ["bundle", "number", "state", "author", "created_at", "drained_at"]
    list_filter = ["state"]
    list_select_related = ["bundle"]
    exclude = ["canonical"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("canonical")

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        return views.page(views.version_list, self)(request)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        version = (
            BundleVersion.objects.filter(pk=object_id).select_related("bundle").defer("canonical").first()
            if object_id.isdigit()
            else None
        )
        if request.method == "GET" and version is not None:
            return HttpResponseRedirect(reverse("admin:adminui_version", args=[version.bundle.name, version.number]))
        return super().change_view(request, object_id, form_url, extra_context)

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

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        return views.page(views.label_list, self)(request)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        label = Label.objects.filter(pk=object_id).select_related("bundle").first() if object_id.isdigit() else None
        if request.method == "GET" and label is not None:
            return HttpResponseRedirect(reverse("admin:adminui_bundle", args=[label.bundle.name]))
        return super().change_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
