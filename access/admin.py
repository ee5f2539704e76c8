"""API keys in the admin: create (the secret is shown once, on the response page, and stored
nowhere), revoke and rotate. Everything goes through access.services, so the rules and the
audit log are the same as from the command line; only admins (superusers) manage keys."""

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from access.actors import actor_for_user
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke, api_key_rotate
from core.errors import DomainError

# django-stubs makes ModelAdmin generic; at run time it is a plain class (no django_stubs_ext here).
if TYPE_CHECKING:
    _Form = forms.ModelForm[ApiKey]
    _Admin = admin.ModelAdmin[ApiKey]
else:
    _Form = forms.ModelForm
    _Admin = admin.ModelAdmin


class ApiKeyCreateForm(_Form):
    scopes_text = forms.CharField(
        label="Scope", required=False, help_text="Bundle-name patterns, comma-separated (support-*); empty: all."
    )

    class Meta:
        model = ApiKey
        fields = ["name", "role", "expires_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(_Admin):
    list_display = ["name", "role", "prefix", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["role"]
    search_fields = ["name", "prefix"]
    actions = ["revoke_keys", "rotate_keys"]
    readonly_fields = [f.name for f in ApiKey._meta.fields]

    @admin.display(description="scope")
    def scope(self, key: ApiKey) -> str:
        return ", ".join(key.scopes) or "all bundles"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # keys are immutable: revoke or rotate instead

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked keys stay, so the audit log and sessions keep their reference

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> type[_Form]:
        return ApiKeyCreateForm

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.readonly_fields if obj else []

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return [(None, {"fields": ["name", "role", "scopes_text", "expires_at"]})]
        return super().get_fieldsets(request, obj)

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        if request.method == "POST":
            form = ApiKeyCreateForm(request.POST)
            if form.is_valid():
                scopes = [s.strip() for s in form.cleaned_data["scopes_text"].split(",") if s.strip()]
                try:
                    key, secret = api_key_create(
                        name=form.cleaned_data["name"],
                        role=form.cleaned_data["role"],
                        scopes=scopes,
                        expires_at=form.cleaned_data["expires_at"],
                        actor=actor_for_user(request.user),
                    )
                except DomainError as exc:
                    self.message_user(request, f"{exc.message} {exc.details}", messages.ERROR)
                else:
                    return self._show_secret(request, key, secret, "API key created")
        return super().add_view(request, form_url, extra_context)

    def _show_secret(self, request: HttpRequest, key: ApiKey, secret: str, title: str) -> TemplateResponse:
        # Rendered straight into the response: never put a secret in messages (cookie storage).
        context = {**self.admin_site.each_context(request), "title": title, "key": key, "secret": secret}
        return TemplateResponse(request, "access/key_secret.html", context)

    @admin.action(description="Revoke the selected keys (they fail on their next request)")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        actor = actor_for_user(request.user)
        for key in queryset:
            api_key_revoke(key=key, actor=actor, reason="revoked in the admin")
        self.message_user(request, f"Revoked {queryset.count()} key(s).")

    @admin.action(description="Rotate the selected key (shows the new secret once)")
    def rotate_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Rotate one key at a time: its new secret is shown once.", messages.WARNING)
            return None
        try:
            key, secret = api_key_rotate(key=queryset.get(), actor=actor_for_user(request.user))
        except DomainError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        return self._show_secret(request, key, secret, "API key rotated")
