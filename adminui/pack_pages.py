"""The admin pages of knowledge packs: the packs, one pack's manifest, domains and the bundles
that list it, and a file's editor (DUTY.md included). Every write calls knowledge.services with
the signed-in person's Actor, exactly as the REST API does."""

from collections.abc import Callable
from functools import update_wrapper
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.actors import actor_for_user
from access.models import Role
from adminui.forms import CODE, add_domain_error
from core.errors import DomainError, Forbidden, NotFound
from knowledge import paths, selectors, services
from knowledge.models import MAX_FILE_BYTES
from registry import selectors as registry_selectors

View = Callable[..., HttpResponse]


def page(view: View, model_admin: ModelAdmin) -> View:
    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, model_admin, *args, **kwargs)
        except (Http404, NotFound) as exc:
            message = getattr(exc, "message", None) or "There is nothing at this address."
            return _render(request, model_admin, "adminui/error.html", "Not found", status=404, message=message)
        except (PermissionDenied, Forbidden) as exc:
            message = getattr(exc, "message", None) or (str(exc.args[0]) if exc.args else "Not allowed.")
            return _render(request, model_admin, "adminui/error.html", "Not allowed", status=403, message=message)

    return update_wrapper(inner, view)


def _render(
    request: HttpRequest, model_admin: ModelAdmin, template: str, title: str, *, status: int = 200, **context: Any
) -> TemplateResponse:
    actor = actor_for_user(request.user)
    ctx = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "actor": actor,
        "can_write": actor.has_role(Role.PUBLISHER),
        **context,
    }
    return TemplateResponse(request, template, ctx, status=status)


def _url(name: str, *args: Any) -> str:
    return reverse(f"admin:{name}", args=args)


class PackForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="Like a bundle name: lowercase letters, digits, . _ -")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class FileForm(forms.Form):
    path = forms.CharField(
        max_length=600,
        help_text="Relative to the pack, e.g. sre/DUTY.md or sre/runbooks/disk-full.md. A top-level "
        "folder is a domain; its DUTY.md is shown to the model in every session's prompt.",
    )
    content = forms.CharField(
        # The prompt editor's widget (adminui's CodeMirror binds to data-editor="text").
        widget=forms.Textarea(
            attrs={**CODE, "rows": 24, "class": "adminui-code adminui-prompt", "data-editor": "text"}
        ),
        required=False,
        strip=False,
        help_text="Text, at most 1 MiB. Or upload a file below instead.",
    )
    upload = forms.FileField(required=False, help_text="A UTF-8 text file; replaces the text above.")

    def text(self) -> str:
        upload = self.cleaned_data.get("upload")
        if upload is None:
            return self.cleaned_data.get("content") or ""
        data = upload.read(MAX_FILE_BYTES + 1)
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise forms.ValidationError("The uploaded file is not UTF-8 text.") from None


def pack_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = actor_for_user(request.user)
    form = PackForm()
    status = 200
    if request.method == "POST":
        form = PackForm(request.POST)
        if form.is_valid():
            try:
                pack = services.pack_create(actor=actor, **form.cleaned_data)
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Pack {pack.name} created. Add its first file below.")
                return HttpResponseRedirect(_url("knowledge_pack", pack.name))
    packs = selectors.packs_with_sizes()
    return _render(
        request, model_admin, "knowledge/pack_list.html", "Knowledge packs", status=status, packs=packs, form=form
    )


def pack_detail(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    pack = selectors.pack_get(name=name)
    files = selectors.pack_listing(pack)
    domains: dict[str, dict[str, Any]] = {}
    for file in files:
        if file.domain:
            entry = domains.setdefault(file.domain, {"name": file.domain, "files": 0, "duty": None})
            entry["files"] += 1
            if paths.is_duty(file.path):
                entry["duty"] = file
    return _render(
        request,
        model_admin,
        "knowledge/pack_detail.html",
        f"Knowledge pack {pack.name}",
        pack=pack,
        files=files,
        domains=sorted(domains.values(), key=lambda d: d["name"]),
        used_by=registry_selectors.bundles_using_pack(pack.name),
        form=FileForm(),
    )


def file_edit(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    """Create (no ?path=) or edit one file; the form posts back here."""
    actor = actor_for_user(request.user)
    pack = selectors.pack_get(name=name)
    status = 200
    existing = None
    if request.method == "POST":
        form = FileForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                file, created = services.file_put(
                    pack=pack, path=form.cleaned_data["path"], content=form.text(), actor=actor
                )
            except forms.ValidationError as exc:
                form.add_error("upload", exc)
                status = 400
            except DomainError as exc:
                add_domain_error(form, exc, default="content")
                status = exc.status
            else:
                messages.success(request, f"{file.path} {'created' if created else 'saved'}.")
                return HttpResponseRedirect(_url("knowledge_pack", pack.name))
        else:
            status = 400
    else:
        path = request.GET.get("path", "")
        existing = selectors.file_get(pack=pack, path=path) if path else None  # NotFound: a 404 page
        initial_path = path or request.GET.get("new", "")  # "write one" links suggest a DUTY.md path
        form = FileForm(initial={"path": initial_path, "content": existing.content if existing else ""})
    title = f"{pack.name}: {existing.path}" if existing else f"{pack.name}: new file"
    return _render(
        request, model_admin, "knowledge/file_form.html", title, status=status, pack=pack, form=form, existing=existing
    )


@require_POST
def file_delete(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    pack = selectors.pack_get(name=name)
    path = request.POST.get("path", "")
    try:
        services.file_delete(pack=pack, path=path, actor=actor_for_user(request.user))
    except DomainError as exc:
        if isinstance(exc, (Forbidden, NotFound)):
            raise
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{path} deleted.")
    return HttpResponseRedirect(_url("knowledge_pack", pack.name))
