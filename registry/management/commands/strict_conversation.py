"""manage.py strict_conversation NAME --on|--off --reason TEXT: switch a bundle's strict
conversation setting (registry.guard): the turn call refuses system/developer messages and
session string variables must be short single lines without template braces."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from access.actors import SYSTEM
from core.errors import DomainError
from registry.models import Bundle
from registry.services import bundle_strict_conversation_set


class Command(BaseCommand):
    help = "Switch a bundle's strict conversation setting on or off (audited)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        state = parser.add_mutually_exclusive_group(required=True)
        state.add_argument("--on", action="store_true")
        state.add_argument("--off", action="store_true")
        parser.add_argument("--reason", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        bundle = Bundle.objects.filter(name=options["name"]).first()
        if bundle is None:
            raise CommandError(f"No bundle named {options['name']!r}.")
        try:
            done = bundle_strict_conversation_set(
                bundle=bundle, enabled=bool(options["on"]), actor=SYSTEM, reason=options["reason"]
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"{done.name}: strict conversation {'on' if done.strict_conversation else 'off'}")
