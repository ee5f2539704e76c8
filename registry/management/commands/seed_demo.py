"""Idempotent demo data for `make run`: a bundle with a production label, fresh demo keys
for each role, and an `admin` superuser with a new random password each run."""

import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from access.actors import SYSTEM
from access.models import ApiKey, Role
from access.services import api_key_create, api_key_revoke
from registry.models import Bundle, Label
from registry.services import bundle_create, label_move, version_publish

DEMO_CONTENT = {
    "system_prompt": "You are a support agent for Acme. Look orders up with `lookup_order` before answering.",
    "tools": [
        {
            "name": "lookup_order",
            "description": "Find an order by its id.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        }
    ],
    "model": {"name": "any-llm", "temperature": 0.2},
}


class Command(BaseCommand):
    help = "Create the demo bundle, demo API keys and an admin login (development only)."

    def add_arguments(self, parser):
        parser.add_argument("--env-file", help="write the demo keys here as shell exports")

    def handle(self, *args, env_file: str | None = None, **options):
        bundle = Bundle.objects.filter(name="support-agent").first()
        if bundle is None:
            bundle = bundle_create(name="support-agent", description="Demo: customer support agent", actor=SYSTEM)
        if not Label.objects.filter(bundle=bundle, name="production").exists():
            version = version_publish(bundle=bundle, content=DEMO_CONTENT, message="Demo v1", actor=SYSTEM).version
            label_move(bundle=bundle, name="production", version=version, actor=SYSTEM, reason="demo set-up")

        exports = []
        for role in Role.values:
            for old in ApiKey.objects.filter(name=f"demo-{role}", revoked_at__isnull=True):
                api_key_revoke(key=old, actor=SYSTEM, reason="demo keys are new each run")
            _, secret = api_key_create(name=f"demo-{role}", role=role, actor=SYSTEM)
            exports.append(f"export {role.upper()}_KEY={secret}")
        if env_file:
            Path(env_file).write_text("\n".join(exports) + "\n")

        password = secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"Demo bundle 'support-agent' has a production label. Keys: {env_file or '(not written)'}")
        self.stdout.write(f"Admin login: user 'admin', password '{password}' (new each run)")
