from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from access.management.commands._keys import CLI, live_keys, replaced_by_rotation
from access.services import api_key_revoke


class Command(BaseCommand):
    help = (
        "Revoke API keys by prefix, or every live key of a name (after a rotation with a grace "
        "period: the old key and the new one). They fail on their very next request."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="the key's prefix (pr_xxxxxxx) or name")
        parser.add_argument("--reason", default="")
        parser.add_argument(
            "--rotated-out",
            action="store_true",
            help="only the keys a rotation replaced: end their grace period now, keep the new key",
        )

    def handle(self, *args: Any, key: str, reason: str, rotated_out: bool = False, **options: Any) -> None:
        keys = live_keys(key)
        if rotated_out:
            keys = replaced_by_rotation(keys)
            if not keys:
                raise CommandError(f"No key named {key!r} is in the grace period of a rotation.")
        with transaction.atomic():  # all of them or none
            revoked = [api_key_revoke(key=found, actor=CLI, reason=reason) for found in keys]
        for found in revoked:
            self.stdout.write(f"Revoked {found.name!r} ({found.prefix}).")
