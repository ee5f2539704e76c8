from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from access.models import ApiKey


class Command(BaseCommand):
    help = "List API keys (never their secrets): prefix, name, role, scope, state, last use."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="include revoked keys")

    def handle(self, *args: Any, all: bool = False, **options: Any) -> None:
        keys = ApiKey.objects.order_by("name", "created_at")
        if not all:
            keys = keys.filter(revoked_at__isnull=True)
        self.stdout.write(f"{'prefix':<12} {'name':<24} {'role':<10} {'scope':<20} {'state':<22} last used")
        for key in keys:
            if key.revoked_at:
                state = f"revoked {key.revoked_at:%Y-%m-%d}"
            elif key.expires_at:
                state = f"expires {key.expires_at:%Y-%m-%d %H:%M}"
            else:
                state = "active"
            last = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
            scope = ",".join(key.scopes) or "*"
            self.stdout.write(f"{key.prefix:<12} {key.name:<24} {key.role:<10} {scope:<20} {state:<22} {last}")
