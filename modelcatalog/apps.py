from django.apps import AppConfig


class ModelCatalogConfig(AppConfig):
    name = "modelcatalog"
    verbose_name = "Model catalog"
    default_auto_field = "django.db.models.BigAutoField"
