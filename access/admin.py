"""API keys in the admin: create (the secret is shown once, on the response page, and stored
nowhere), revoke and rotate. Everything goes through access.services, so the rules and the
audit log are the same as from the command line; only admins (superusers) manage keys."""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from access.actors import actor_for_user
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke, api_key_rotate
from core.errors import DomainError


class ApiKeyCreateForm(forms.ModelForm):
    scopes_text = forms.CharField(
        label="Scope", required=False, help_text="Bundle-name patterns, comma-separated (support-*); empty: all."
    )

    class Meta:
        model = ApiKey
        fields = ["name", "role", "expires_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "prefix", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["role"]
    search_fields = ["name", "prefix"]
    actions = ["revoke_keys", "rotate_keys"]
    readonly_fields = [f.name for f in ApiKey._meta.fields]

    @admin.display(description="scope")
    def scope(self, key: ApiKey) -> str:
        return ", ".join(key.scopes) or "all bundles"

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # keys are immutable: revoke or rotate instead

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoked keys stay, so the audit log and sessions keep their reference

    def get_form(self, request, obj=None, **kwargs):
        return ApiKeyCreateForm

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj else []

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["name", "role", "scopes_text", "expires_at"]})]
        return super().get_fieldsets(request, obj)

    def add_view(self, request, form_url="", extra_context=None):
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

    def _show_secret(self, request, key: ApiKey, secret: str, title: str) -> TemplateResponse:
        # Rendered straight into the response: never put a secret in messages (cookie storage).
        context = {**self.admin_site.each_context(request), "title": title, "key": key, "secret": secret}
        return TemplateResponse(request, "access/key_secret.html", context)

    @admin.action(description="Revoke the selected keys (they fail on their next request)")
    def revoke_keys(self, request, queryset):
        actor = actor_for_user(request.user)
        for key in queryset:
            api_key_revoke(key=key, actor=actor, reason="revoked in the admin")
        self.message_user(request, f"Revoked {queryset.count()} key(s).")

    @admin.action(description="Rotate the selected key (shows the new secret once)")
    def rotate_keys(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Rotate one key at a time: its new secret is shown once.", messages.WARNING)
            return None
        try:
            key, secret = api_key_rotate(key=queryset.get(), actor=actor_for_user(request.user))
        except DomainError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        return self._show_secret(request, key, secret, "API key rotated")
