from django.core.management.base import BaseCommand

from access.management.commands._keys import CLI, find_key
from access.services import api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key (by prefix or name). It fails on its very next request."

    def add_arguments(self, parser):
        parser.add_argument("key", help="the key's prefix (pr_xxxxxxx) or name")
        parser.add_argument("--reason", default="")

    def handle(self, *args, key: str, reason: str, **options):
        revoked = api_key_revoke(key=find_key(key), actor=CLI, reason=reason)
        self.stdout.write(f"Revoked {revoked.name!r} ({revoked.prefix}).")
