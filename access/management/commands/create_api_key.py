from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from access.management.commands._keys import CLI
from access.models import Role
from access.services import api_key_create
from core.errors import DomainError


class Command(BaseCommand):
    help = "Create an API key. The secret is printed alone on the last line of stdout, once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument(
            "--scope", action="append", default=[], help="bundle-name pattern such as 'support-*' (repeatable)"
        )
        parser.add_argument("--expires-in-days", type=int, default=None)

    def handle(
        self, *args: Any, name: str, role: str, scope: list[str], expires_in_days: int | None, **options: Any
    ) -> None:
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        try:
            key, secret = api_key_create(name=name, role=role, scopes=scope, expires_at=expires_at, actor=CLI)
        except DomainError as exc:
            raise CommandError(f"{exc.message} {exc.details}") from exc
        scopes = ", ".join(key.scopes) or "all bundles"
        self.stdout.write(f"Created key {key.name!r}: role {key.role}, scope {scopes}, prefix {key.prefix}.")
        self.stdout.write("Store the secret now; it cannot be shown again:")
        self.stdout.write(secret)
