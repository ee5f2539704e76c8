"""The first admin and one API key per role, for a fresh deployment, in one command:

    docker compose exec web python manage.py bootstrap

Idempotent: a second run creates nothing and says so (secrets are stored as hashes, so the
first run's cannot be shown again; rotate a key with rotate_api_key, set a password with
changepassword)."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from access.management.commands._keys import CLI
from access.models import ApiKey, Role
from access.services import api_key_create

KEY_NAME = "bootstrap-{role}"


class Command(BaseCommand):
    help = "Create the first admin (superuser) and one API key per role; prints their secrets once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    @transaction.atomic
    def handle(self, *args: Any, username: str, **options: Any) -> None:
        User = get_user_model()
        password = None
        if not User.objects.filter(username=username).exists():
            password = secrets.token_urlsafe(16)
            User.objects.create_superuser(username=username, email="", password=password)
        created = {}
        for role in Role.values:
            name = KEY_NAME.format(role=role)
            if not ApiKey.objects.filter(name=name).exists():
                created[role] = api_key_create(name=name, role=role, actor=CLI)[1]
        if password is None and not created:
            self.stdout.write(
                f"Already bootstrapped: {username!r} and the bootstrap-* keys exist; nothing created. "
                "New secrets: manage.py rotate_api_key bootstrap-ROLE, manage.py changepassword."
            )
            return
        self.stdout.write("Store these now; they cannot be shown again.")
        if password is not None:
            self.stdout.write(f"Admin login: user {username!r}, password {password}")
        for role, secret in created.items():
            self.stdout.write(f"{role.upper()}_KEY={secret}")
