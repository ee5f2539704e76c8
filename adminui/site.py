"""The admin site: who may sign in to it, decided in one place.

Django's stock admin lets in only users with "Staff status" ticked, so a person an admin
adds to the group "Prompt engineers" or "Ops" (the README's steps) could not sign in until
someone also ticked that box. Here membership of either group is enough: the site's
`has_permission` (every admin page) and its login form ask the same `may_use_admin`, and
taking someone out of the groups takes them out of the admin (unless they are staff)."""

from typing import Any

from django.conf import settings
from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

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


class RegistryAdminSite(AdminSite):
    site_header = "Prompt registry"
    site_title = "Prompt registry admin"
    index_title = "Bundles, versions, labels and sessions"
    login_form = RegistryAuthenticationForm

    def has_permission(self, request: HttpRequest) -> bool:
        return may_use_admin(request.user)

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
