from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from access.management.commands._keys import CLI, find_key
from access.services import api_key_rotate


class Command(BaseCommand):
    help = "Replace a key with a new secret (same name, role, scope). Prints the new secret last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key's prefix (pr_xxxxxxx) or name")
        parser.add_argument(
            "--grace-minutes", type=int, default=0, help="keep the old key working this long (default: stop now)"
        )

    def handle(self, *args: Any, key: str, grace_minutes: int, **options: Any) -> None:
        old = find_key(key)
        new, secret = api_key_rotate(key=old, actor=CLI, grace=timedelta(minutes=grace_minutes))
        until = f"until {grace_minutes} min from now" if grace_minutes else "no longer"
        self.stdout.write(f"Rotated {old.name!r}: old key {old.prefix} works {until}; new key {new.prefix}.")
        self.stdout.write("Store the secret now; it cannot be shown again:")
        self.stdout.write(secret)
