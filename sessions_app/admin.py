"""Sessions in the admin: a searchable list and a detail page (adminui views), where ops can
end a session through sessions_app.services.session_end. The stock pages are read-only."""

from uuid import UUID

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse

from adminui import views
from sessions_app.models import Session


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ["id", "bundle", "version", "label", "status", "started_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["id", "external_id", "bundle__name"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def get_urls(self):
        def page(view, route: str, name: str):
            return path(route, self.admin_site.admin_view(views.page(view, self)), name=name)

        return [
            page(views.session_detail, "<uuid:session_id>/detail/", "adminui_session"),
            page(views.session_end, "<uuid:session_id>/end/", "adminui_session_end"),
        ] + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        return views.page(views.session_list, self)(request)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        try:
            session_id = UUID(object_id)
        except ValueError:
            session_id = None
        if request.method == "GET" and session_id and Session.objects.filter(pk=session_id).exists():
            return HttpResponseRedirect(reverse("admin:adminui_session", args=[object_id]))
        return super().change_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
