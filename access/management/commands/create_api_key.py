from django.core.management.base import BaseCommand, CommandError

from access.models import Role
from access.services import api_key_create
from registry.errors import DomainError


class Command(BaseCommand):
    help = "Create an API key. The secret is printed alone on the last line of stdout, once."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)

    def handle(self, *args, name: str, role: str, **options):
        try:
            key, secret = api_key_create(name=name, role=role)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Created key {key.name!r} with role {key.role} (prefix {key.prefix}).")
        self.stdout.write("Store the secret now; it cannot be shown again:")
        self.stdout.write(secret)
