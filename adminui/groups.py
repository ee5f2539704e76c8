"""The two groups of people who use the admin, and the model permissions each one holds.

Model permissions decide what the admin shows (which pages a person may open); the role
that `access.actors.actor_for_user` derives from the same groups decides what the
services allow. Group names are the ones actor_for_user looks for."""

from typing import Any

from django.apps.registry import Apps

from access.groups import OPS, PROMPT_ENGINEERS

_READ = [
    "registry.view_bundle",
    "registry.view_bundleversion",
    "registry.view_label",
    "registry.view_historicallabel",
    "sessions_app.view_session",
]
_PUBLISH = [
    "registry.add_bundle",
    "registry.add_bundleversion",
    "registry.change_label",  # moves of labels that are not protected (the service checks)
]

GROUP_PERMISSIONS: dict[str, list[str]] = {
    PROMPT_ENGINEERS: _READ + _PUBLISH,
    # Ops also ends sessions; protected moves and rollbacks are the service's ops role.
    OPS: _READ + _PUBLISH + ["sessions_app.change_session"],
}


def groups_sync(*, apps: Apps) -> None:
    """Create the groups and give each exactly its permissions. Idempotent; `apps` is the
    migration's historical registry (or django.apps.apps), and the permissions must exist."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, wanted in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = []
        for dotted in wanted:
            app_label, codename = dotted.split(".")
            perms.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(perms)


def may_use_admin(user: Any) -> bool:
    """Whether `user` may sign in to the admin: active, and staff, a superuser or a member of
    one of the two groups (membership alone is enough: adding a teammate to a group is the
    whole job). What they may do there is their group's role (access.actors.actor_for_user)."""
    if not user.is_active:
        return False
    if user.is_staff or user.is_superuser:
        return True
    return user.groups.filter(name__in=GROUP_PERMISSIONS).exists()
