from django.contrib.admin.apps import AdminConfig


class RegistryAdminConfig(AdminConfig):
    """Installed instead of django.contrib.admin, so `admin.site` is adminui.site's
    RegistryAdminSite (who may sign in). A module of its own: settings load it before any
    model exists, and adminui.site imports the auth forms, which need the models."""

    default_site = "adminui.site.RegistryAdminSite"
