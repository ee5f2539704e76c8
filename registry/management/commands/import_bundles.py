"""manage.py import_bundles DIR [--allow-breaking]: import an export (export_bundles or
`promptreg export`). Every object is checked against its hash before anything is written, and
all bundles go in one transaction; importing again changes nothing."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from access.actors import SYSTEM
from core.errors import DomainError
from registry import transfer
from registry.exportdir import ExportDirError, read_export


class Command(BaseCommand):
    help = "Import the bundles of an export directory (same hashes; idempotent; all or nothing)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("dir")
        parser.add_argument("--allow-breaking", action="store_true", help="move labels past their compatibility policy")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            found = read_export(Path(options["dir"]))
        except ExportDirError as exc:
            raise CommandError(str(exc)) from None
        try:
            with transaction.atomic():
                results = [
                    transfer.bundle_import(
                        document=document,
                        objects=objects,
                        actor=SYSTEM,
                        allow_breaking=options["allow_breaking"],
                        max_publishes=None,  # an operator's command, not a request: no call to keep short
                    )
                    for document, objects in found
                ]
        except DomainError as exc:
            raise CommandError(f"{exc.message} {json.dumps(exc.details)} (nothing was imported)") from None
        for result in results:
            self.stdout.write(
                f"{result.bundle}: {len(result.versions_created)} versions published, "
                f"{len(result.versions_present)} already here, labels moved: {', '.join(result.labels_moved) or '-'}"
            )
