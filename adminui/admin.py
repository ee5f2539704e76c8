"""adminui registers its own pages: it replaces the stock Bundle, BundleVersion, Label and
Session admins (read-only, defined by their apps) with subclasses that mount the pages of
adminui.views through get_urls() and send the stock pages' GETs to them.

Every write those pages make goes through the services with the signed-in person's Actor."""

from typing import Any
from uuid import UUID

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from adminui import pack_admin as _pack_admin  # noqa: F401  (registers the pack pages)
from adminui import users as _users  # noqa: F401  (registers the user form)
from adminui import views
from registry import admin as registry_admin
from registry.models import Bundle, BundleVersion, Label
from sessions_app import admin as sessions_admin
from sessions_app.models import Session

for model in (Bundle, BundleVersion, Label, Session):
    admin.site.unregister(model)


def _page(model_admin: admin.ModelAdmin, view: views.View, route: str, name: str) -> URLPattern:
    return path(route, model_admin.admin_site.admin_view(views.page(view, model_admin)), name=name)


@admin.register(Bundle)
class BundleAdmin(registry_admin.BundleAdmin):
    """The bundle list and the adminui pages, all under /admin/registry/bundle/."""

    def get_urls(self) -> list[URLPattern]:
        # Before the stock patterns: "<name>/history/" replaces the stock object history.
        return [
            _page(self, views.drain_dashboard, "drain/", "adminui_drain"),
            _page(self, views.drain_json, "drain.json", "adminui_drain_json"),
            _page(self, views.drain_tools, "drain/tools/", "adminui_drain_tools"),
            _page(self, views.change_list, "changes/", "adminui_changes"),
            _page(self, views.suite_list, "suites/", "adminui_suites"),
            _page(self, views.suite_new, "suites/new/", "adminui_suite_new"),
            _page(self, views.suite_detail, "suites/<str:name>/", "adminui_suite"),
            _page(self, views.eval_compare, "evals/compare/", "adminui_eval_compare"),
            _page(self, views.models_retiring, "models/retiring/", "adminui_models_retiring"),
            _page(self, views.model_catalog, "models/", "adminui_models"),
            _page(self, views.model_migrate, "<str:name>/versions/<int:number>/migrate/", "adminui_model_migrate"),
            _page(self, views.change_decide, "changes/<uuid:change_id>/<str:verb>/", "adminui_change_decide"),
            _page(self, views.bundle_overview, "<str:name>/versions/", "adminui_bundle"),
            _page(self, views.bundle_edit, "<str:name>/edit/", "adminui_bundle_edit"),
            _page(self, views.version_new, "<str:name>/versions/new/", "adminui_version_new"),
            _page(self, views.playground_page, "<str:name>/playground/", "adminui_playground"),
            _page(self, views.eval_start, "<str:name>/versions/<int:number>/evals/start/", "adminui_eval_start"),
            _page(self, views.version_detail, "<str:name>/versions/<int:number>/", "adminui_version"),
            _page(self, views.version_revoke, "<str:name>/versions/<int:number>/revoke/", "adminui_revoke"),
            _page(self, views.version_diff, "<str:name>/diff/", "adminui_diff"),
            _page(self, views.label_move, "<str:name>/move/", "adminui_move"),
            _page(self, views.label_rollback, "<str:name>/labels/<str:label>/rollback/", "adminui_rollback"),
            _page(self, views.label_policy, "<str:name>/labels/<str:label>/policy/", "adminui_label_policy"),
            _page(self, views.version_approve, "<str:name>/versions/<int:number>/approve/", "adminui_approve"),
            _page(self, views.bundle_history, "<str:name>/history/", "adminui_history"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return views.page(views.bundle_list, self)(request)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return views.page(views.bundle_add, self)(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        bundle = Bundle.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if request.method == "GET" and bundle is not None:
            return HttpResponseRedirect(reverse("admin:adminui_bundle", args=[bundle.name]))
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(BundleVersion)
class BundleVersionAdmin(registry_admin.BundleVersionAdmin):
    """The searchable version list; GET of the stock change page goes to the version page."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return views.page(views.version_list, self)(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        version = (
            BundleVersion.objects.filter(pk=object_id).select_related("bundle").defer("canonical").first()
            if object_id.isdigit()
            else None
        )
        if request.method == "GET" and version is not None:
            return HttpResponseRedirect(reverse("admin:adminui_version", args=[version.bundle.name, version.number]))
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(Label)
class LabelAdmin(registry_admin.LabelAdmin):
    """The searchable label list; GET of the stock change page goes to the bundle page (a
    label's moves are there)."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return views.page(views.label_list, self)(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        label = Label.objects.filter(pk=object_id).select_related("bundle").first() if object_id.isdigit() else None
        if request.method == "GET" and label is not None:
            return HttpResponseRedirect(reverse("admin:adminui_bundle", args=[label.bundle.name]))
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(Session)
class SessionAdmin(sessions_admin.SessionAdmin):
    """The searchable session list and a detail page, where ops can end a session."""

    def get_urls(self) -> list[URLPattern]:
        return [
            _page(self, views.session_detail, "<uuid:session_id>/detail/", "adminui_session"),
            _page(self, views.session_end, "<uuid:session_id>/end/", "adminui_session_end"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return views.page(views.session_list, self)(request)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            session_id: UUID | None = UUID(object_id)
        except ValueError:
            session_id = None
        if request.method == "GET" and session_id and Session.objects.filter(pk=session_id).exists():
            return HttpResponseRedirect(reverse("admin:adminui_session", args=[object_id]))
        return super().change_view(request, object_id, form_url, extra_context)
