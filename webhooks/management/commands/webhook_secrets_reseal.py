"""Re-encrypt every webhook secret under the first key of WEBHOOK_SECRET_KEYS (run after
putting a new key first; then the old keys can be dropped), and seal any secret a previous
release left in plaintext."""

from typing import Any

from django.core.management.base import BaseCommand

from webhooks.services import secrets_reseal


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"resealed {secrets_reseal()} webhook endpoint secret(s)")
