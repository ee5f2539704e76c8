from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        # The registry counts the sessions pinned to a version through registry.pins and never
        # imports this app (registry sits below it).
        from registry import pins
        from sessions_app.selectors import SessionPins

        pins.register(SessionPins())
