"""manage.py models_import FILE [--provider P] [--dry-run] [--reason TEXT]: refresh the model
catalog from a provider's model list (the JSON OpenAI's or Anthropic's `GET /v1/models`
returns, or `aws bedrock list-foundation-models` prints: Bedrock's own dates) or a team's
file ({"models": [{"provider", "name", <facts>}]}). Nothing is fetched: save the JSON first.
Every change is an audited override (modelcatalog.services.model_put) whose source is the
file, read today."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from access.actors import SYSTEM
from core.errors import DomainError
from modelcatalog import services


class Command(BaseCommand):
    help = "Import a provider's model list (or a team's catalog file) into the model catalog."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file")
        parser.add_argument("--provider", default=None, help="the provider of every model in the file")
        parser.add_argument("--reason", default="models_import", help="recorded in the audit log")
        parser.add_argument("--dry-run", action="store_true", help="show the changes, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        try:
            changes = services.models_import(
                data=data,
                source_url=f"file:{path.name}",
                actor=SYSTEM,
                reason=options["reason"],
                provider=options["provider"],
                dry_run=options["dry_run"],
            )
        except DomainError as exc:
            raise CommandError(f"{path}: {exc.message} {exc.details}") from None
        for change in changes:
            mark = "new " if change["new"] else ""
            self.stdout.write(f"{mark}{change['provider']}/{change['name']}: {json.dumps(change['facts'])}")
        verb = "would change" if options["dry_run"] else "changed"
        self.stdout.write(f"{verb} {len(changes)} models")
