"""The user form as the README's "add a teammate" step needs it: the roles (the two groups,
adminui.groups) as checkboxes, not Django's staff/superuser flags and raw permission list. Group
membership is what signs a person in and what their role is (adminui.site, access.actors);
superusers still find the two flags, folded away. Per-user permissions are not offered: a role
is the unit of access here."""

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import ManyToManyField
from django.http import HttpRequest

from access.models import SsoIdentity

SSO_HELP = (
    "This person signs in through the identity provider. Their roles are set from the provider's group "
    "claim at every sign-in, so a change of roles here lasts until their next sign-in; untick Active to "
    "keep them out."
)
ROLES_HELP = (
    "Prompt engineers write versions and move labels that are not protected; Ops also move protected "
    "labels, roll back, revoke versions and end sessions. Membership alone lets the person sign in."
)


class TeammateAdmin(UserAdmin):
    list_display = ("username", "email", "first_name", "last_name", "roles", "is_active")
    list_filter = ("groups", "is_active")
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("username", "password1", "password2", "groups")}),)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return self.add_fieldsets
        sets: list[Any] = [
            (None, {"fields": ("username", "password")}),
            ("Personal info", {"fields": ("first_name", "last_name", "email")}),
            ("Roles", {"fields": ("is_active", "groups"), "description": ROLES_HELP}),
            ("Important dates", {"fields": ("last_login", "date_joined")}),
        ]
        if SsoIdentity.objects.filter(user=obj).exists():
            # Roles edited here last until the person's next sign-in, which sets them from the claim.
            sets.insert(2, ("Single sign-on", {"fields": ("single_sign_on",), "description": SSO_HELP}))
        if request.user.is_superuser:
            sets.append(("Advanced", {"classes": ("collapse",), "fields": ("is_staff", "is_superuser")}))
        return sets

    def formfield_for_manytomany(self, db_field: ManyToManyField, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "groups":
            kwargs["widget"] = forms.CheckboxSelectMultiple
            kwargs["label"] = "Roles"
            kwargs["help_text"] = ROLES_HELP
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return (*super().get_readonly_fields(request, obj), "single_sign_on")

    @admin.display(description="Identity")
    def single_sign_on(self, obj: User) -> str:
        identity = SsoIdentity.objects.filter(user=obj).first()
        if identity is None:
            return "—"
        roles = ", ".join(identity.roles) or "none"
        return f"subject {identity.subject} at {identity.issuer}; roles at the last sign-in: {roles}"

    @admin.display(description="Roles")
    def roles(self, obj: User) -> str:
        return ", ".join(g.name for g in obj.groups.all()) or "—"

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("groups")


admin.site.unregister(User)
admin.site.register(User, TeammateAdmin)
