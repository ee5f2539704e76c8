from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"

    def ready(self) -> None:
        # The domain counts through core.instruments and never imports this app.
        from core import instruments as core_instruments
        from metrics.instruments import Instruments

        core_instruments.register(Instruments())
