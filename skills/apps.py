from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills"

    def ready(self) -> None:
        # A session's L3 cards end with it; sessions_app calls this and never names our table.
        from sessions_app import hooks
        from skills.services import session_cards_drop

        hooks.on_sessions_ended(session_cards_drop)
