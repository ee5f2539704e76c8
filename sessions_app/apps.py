from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        # The registry counts the sessions pinned to a version through registry.pins and never
        # imports this app (registry sits below it).
        from access import hooks
        from registry import pins
        from sessions_app.selectors import SessionPins
        from sessions_app.services import sessions_to_lineage

        pins.register(SessionPins())
        # A rotated key's sessions move to its lineage; access calls this, never our table.
        hooks.on_key_rotated(sessions_to_lineage)
