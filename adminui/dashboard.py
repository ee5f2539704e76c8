"""The admin's first page: what ops asks first (what each label serves, what drains and since
when, what was revoked, what changed lately and who did it, which webhooks fail). The reads are
adminui.selectors.dashboard; people without the view permissions get Django's app list."""

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest
from django.template.response import TemplateResponse

from adminui.selectors import dashboard


def home(site: AdminSite, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse | None:
    """The dashboard, or None when this person may not read bundles (the caller shows the stock index)."""
    if not request.user.has_perm("registry.view_bundle"):
        return None
    context = {
        **site.each_context(request),
        "title": "Home",
        "subtitle": None,
        "app_list": site.get_app_list(request),
        **dashboard(),
        **(extra_context or {}),
    }
    request.current_app = site.name
    return TemplateResponse(request, "adminui/home.html", context)
