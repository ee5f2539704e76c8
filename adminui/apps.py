from django.apps import AppConfig


class AdminUiConfig(AppConfig):
    name = "adminui"
    verbose_name = "Admin UI"
