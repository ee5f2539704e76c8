"""Idempotent demo data for `make run`: a bundle with a production label, demo keys for each
role, and an `admin` superuser.

The keys and the password are kept across restarts (an agent host configured with a pasted key,
or a logged-in browser, keeps working): with --env-file / --password-file naming files that
hold working ones, they are used again; new ones are made only when those files are missing
(`make clean`), no longer work (another database), or --new asks for them."""

import os
import re
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from access.actors import SYSTEM
from access.models import ApiKey, Role
from access.services import api_key_authenticate, api_key_create, api_key_revoke
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


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (it holds secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)  # an older file may have been created with a wider mode


def _kept_keys(env_file: Path | None) -> dict[str, str]:
    """ROLE -> secret from a previous run's env file, for the keys that still work as that role."""
    if env_file is None or not env_file.exists():
        return {}
    kept = {}
    for role, secret in re.findall(r"^export ([A-Z]+)_KEY=(\S+)$", env_file.read_text(), re.M):
        actor = api_key_authenticate(secret=secret)
        if actor is not None and actor.role == role.lower() and actor.name == f"key:demo-{role.lower()}":
            kept[role.lower()] = secret
    return kept


class Command(BaseCommand):
    help = "Create the demo bundle, demo API keys and an admin login (development only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--env-file", help="the demo keys as shell exports (kept if they still work)")
        parser.add_argument("--password-file", help="the admin's password (kept if it still works)")
        parser.add_argument("--registry-url", help="also export REGISTRY_URL (the running server) in --env-file")
        parser.add_argument("--new", action="store_true", help="new keys and a new password even if the old work")

    def handle(
        self,
        *args: Any,
        env_file: str | None = None,
        password_file: str | None = None,
        registry_url: str | None = None,
        new: bool = False,
        **options: Any,
    ) -> None:
        _demo_bundle()
        _demo_keys(Path(env_file) if env_file else None, new=new, registry_url=registry_url)
        password, fresh = _demo_admin(Path(password_file) if password_file else None, new=new)
        made = "new" if fresh else "kept from the last run"
        self.stdout.write(f"Demo bundle 'support-agent' has a production label. Keys: {env_file or '(not written)'}")
        self.stdout.write(f"Admin login: user 'admin', password '{password}' ({made})")


def _demo_bundle() -> None:
    bundle = Bundle.objects.filter(name="support-agent").first()
    if bundle is None:
        bundle = bundle_create(name="support-agent", description="Demo: customer support agent", actor=SYSTEM)
    if not Label.objects.filter(bundle=bundle, name="production").exists():
        version = version_publish(bundle=bundle, content=DEMO_CONTENT, message="Demo v1", actor=SYSTEM).version
        label_move(bundle=bundle, name="production", version=version, actor=SYSTEM, reason="demo set-up")


def _demo_keys(env_path: Path | None, *, new: bool, registry_url: str | None) -> None:
    """A key per role, kept from the env file while it still works; written as shell exports."""
    kept = {} if new else _kept_keys(env_path)
    keys = {}
    for role in Role.values:
        if role in kept:
            keys[role] = kept[role]
            continue
        for old in ApiKey.objects.filter(name=f"demo-{role}", revoked_at__isnull=True):
            api_key_revoke(key=old, actor=SYSTEM, reason="new demo keys")
        keys[role] = api_key_create(name=f"demo-{role}", role=role, actor=SYSTEM)[1]
    exports = [f"export {role.upper()}_KEY={secret}" for role, secret in keys.items()]
    if registry_url:
        exports.append(f"export REGISTRY_URL={registry_url}")
    if env_path is not None:
        _write_private(env_path, "\n".join(exports) + "\n")


def _demo_admin(password_path: Path | None, *, new: bool) -> tuple[str, bool]:
    """The superuser `admin`, its password kept from the file while it still works; returns the
    password and whether it is new."""
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True})
    password = password_path.read_text().strip() if password_path and password_path.exists() else ""
    fresh = new or not password or not user.check_password(password)
    if fresh:
        password = secrets.token_urlsafe(12)
        user.set_password(password)
    if fresh or not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        user.save()
    if password_path is not None:
        _write_private(password_path, password + "\n")
    return password, fresh
