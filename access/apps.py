from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "Access"

    def ready(self) -> None:
        from access import checks  # noqa: F401  (registers the system checks)
