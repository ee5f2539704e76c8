from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The domain emits through core.events and never imports this app.
        from core import events
        from webhooks.services import DELIVERIES

        events.subscribe(DELIVERIES)
