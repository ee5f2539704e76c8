"""The admin site: who may sign in to it, decided in one place.

Django's stock admin lets in only users with "Staff status" ticked, so a person an admin
adds to the group "Prompt engineers" or "Ops" (the README's steps) could not sign in until
someone also ticked that box. Here membership of either group is enough: the site's
`has_permission` (every admin page) and its login form ask the same `may_use_admin`, and
taking someone out of the groups takes them out of the admin (unless they are staff).

It also draws the top navigation (templates/admin/base_site.html) and has no model sidebar:
the navigation lists the main pages and then every other page the sidebar would have listed
for this person, so dropping the sidebar leaves no page unreachable."""

from typing import Any

from django.conf import settings
from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from adminui import sso
from adminui.dashboard import home
from adminui.groups import may_use_admin


class RegistryAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "invalid_login": (
            "Please enter the correct %(username)s and password of an account in the group "
            "Prompt engineers or Ops (or a staff account). Both fields may be case-sensitive."
        ),
    }

    def confirm_login_allowed(self, user: Any) -> None:
        # AuthenticationForm's own check (is_active), then ours instead of the stock is_staff one.
        super(AdminAuthenticationForm, self).confirm_login_allowed(user)
        if not may_use_admin(user):
            raise ValidationError(
                self.error_messages["invalid_login"],
                code="invalid_login",
                params={"username": self.username_field.verbose_name},
            )


# The top navigation's main pages, in its order; the other model pages follow them.
MAIN_PAGES = (
    ("Bundles", "admin:registry_bundle_changelist"),
    ("Versions", "admin:registry_bundleversion_changelist"),
    ("Labels", "admin:registry_label_changelist"),
    ("Changes", "admin:adminui_changes"),
    ("Drain dashboard", "admin:adminui_drain"),
    ("Models", "admin:adminui_models"),
    ("Sessions", "admin:sessions_app_session_changelist"),
    ("Knowledge packs", "admin:knowledge_pack_changelist"),
)


class RegistryAdminSite(AdminSite):
    site_header = "Prompt registry"
    site_title = "Prompt registry admin"
    index_title = "Bundles, versions, labels and sessions"
    login_form = RegistryAuthenticationForm
    # The sidebar repeated the top navigation and squeezed the tables beside it (at 1280 px the
    # API-keys table went behind the filter panel); nav_pages below lists what it listed.
    enable_nav_sidebar = False

    def has_permission(self, request: HttpRequest) -> bool:
        return may_use_admin(request.user)

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        context = super().each_context(request)
        context["nav_pages"] = self.nav_pages(context["available_apps"])
        return context

    def nav_pages(self, available_apps: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """(name, url) of the top navigation: the main pages, then each model page of the app
        list (the ones this person may open: API keys, audit events, users, ...) not among them."""
        pages = [(name, reverse(url_name, current_app=self.name)) for name, url_name in MAIN_PAGES]
        shown = {url for _, url in pages}
        for app in available_apps:
            for model in app["models"]:
                url = model.get("admin_url")
                if url and url not in shown:
                    pages.append((model["name"], url))
                    shown.add(url)
        return pages

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Single sign-on next to (or instead of) the password form: templates/admin/login.html.
        context = {
            "sso_enabled": settings.SSO_ENABLED,
            "password_login": settings.ADMIN_PASSWORD_LOGIN,
            "sso_refused": request.GET.get("sso") == "refused",
            **(extra_context or {}),
        }
        return super().login(request, context)

    def logout(  # type: ignore[override]  # a redirect to the provider, not only the logged-out page
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Someone who signed in through the provider is sent on to end its session there too.
        ended = sso.logout(request) if request.method == "POST" else None
        return ended or super().logout(request, extra_context)

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        # The dashboard first; Django's app list for those who may not read bundles.
        return home(self, request, extra_context) or super().index(request, extra_context)
