"""What every admin page shares: binding a page to its ModelAdmin, rendering with the admin's
context, refusing what a person may not see or do, and the small texts several pages show."""

import json
from collections.abc import Callable
from datetime import UTC
from functools import update_wrapper
from typing import Any

from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from access.actors import Actor, actor_for_user
from adminui import selectors
from core.errors import Forbidden, NotFound
from registry.models import Bundle, BundleVersion, Label
from registry.selectors import bundle_get, label_targets_out

View = Callable[..., HttpResponse]


def page(view: View, model_admin: ModelAdmin) -> View:
    """Bind a page to its ModelAdmin and show refusals and missing objects as admin pages
    (the project's handlers answer JSON, which suits the API, not a person)."""

    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, model_admin, *args, **kwargs)
        except (Http404, NotFound) as exc:
            return error(request, model_admin, "Not found", _text(exc, "There is nothing at this address."), 404)
        except (PermissionDenied, Forbidden) as exc:
            return error(request, model_admin, "Not allowed", _text(exc, "You may not open this page."), 403)

    return update_wrapper(inner, view)


def _text(exc: Exception, fallback: str) -> str:
    return getattr(exc, "message", None) or (str(exc.args[0]) if exc.args else fallback)


def error(request: HttpRequest, model_admin: ModelAdmin, title: str, message: str, status: int) -> HttpResponse:
    return render(request, model_admin, "adminui/error.html", title, status=status, message=message)


def render(
    request: HttpRequest, model_admin: ModelAdmin, template: str, title: str, *, status: int = 200, **context: Any
) -> TemplateResponse:
    ctx = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "actor": actor_for_user(request.user),
        **context,
    }
    return TemplateResponse(request, template, ctx, status=status)


def need_view(request: HttpRequest, model_admin: ModelAdmin) -> Actor:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied("Your account may not see these pages; ask an admin to add you to a group.")
    return actor_for_user(request.user)


def need_role(actor: Actor, role: str, doing: str) -> None:
    """Refuse to *show* a form the person cannot use (a POST still goes to the service)."""
    if not actor.has_role(role):
        raise PermissionDenied(f"{doing} needs the {role} role; you have {actor.role}.")


def bundle_of(name: str) -> Bundle:
    return bundle_get(name=name)  # NotFound becomes a 404 page


def version_of(bundle: Bundle, number: Any) -> BundleVersion:
    try:
        number = int(number)
    except (TypeError, ValueError):
        raise NotFound(f"{number!r} is not a version number.") from None
    version = selectors.version_by_number(bundle, number)
    if version is None:
        raise NotFound(f"Bundle {bundle.name!r} has no version {number}.")
    return version


def label_of(bundle: Bundle, name: str) -> Label:
    label = selectors.label_now(bundle, name)
    if label is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
    return label


def content_of(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(version.canonical))


def url(name: str, *args: Any, query: str = "") -> str:
    return reverse(f"admin:{name}", args=args) + (f"?{query}" if query else "")


def version_choices(bundle: Bundle, *, exclude_revoked: bool = True) -> list[tuple[int, str]]:
    return [(v.number, version_label(v)) for v in selectors.versions_brief(bundle, exclude_revoked=exclude_revoked)]


def version_label(v: BundleVersion) -> str:
    message = v.message.splitlines()[0] if v.message else ""
    if len(message) > 60:
        message = message[:59] + "…"
    return f"v{v.number} ({v.state}) {message}"


def split_text(targets: list[dict[str, int]]) -> str:
    """`v3` for a single target, `v3 90% · v4 10%` for a split (registry.selectors.label_targets_out)."""
    if len(targets) == 1 and targets[0]["weight"] == 100:
        return f"v{targets[0]['version']}"
    return " · ".join(f"v{t['version']} {t['weight']}%" for t in targets)


def when(at: Any) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else ""


def label_state_text(label: Label) -> str:
    """What a label is now, for the person whose confirm was for an older state of it."""
    return (
        f"{label.name} now targets {split_text(label_targets_out(label))} (revision {label.revision}, "
        f"changed {when(label.updated_at)} UTC by {label.updated_by})"
    )
