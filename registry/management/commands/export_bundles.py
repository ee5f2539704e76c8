"""manage.py export_bundles DIR [--bundle NAME ...]: every bundle (or the ones named) as a
content-addressed export (registry.exportdir), for import_bundles elsewhere."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from access.actors import SYSTEM
from registry import selectors, transfer
from registry.exportdir import write_document, write_object


class Command(BaseCommand):
    help = "Write every bundle's versions (canonical bytes, by hash) and labels to DIR."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("dir")
        parser.add_argument("--bundle", action="append", default=[], help="only this bundle (repeatable)")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["dir"])
        names = options["bundle"] or list(selectors.bundles_visible(SYSTEM).values_list("name", flat=True))
        versions = 0
        for name in names:
            try:
                bundle = selectors.bundle_get(name=name, actor=SYSTEM)
            except Exception as exc:
                raise CommandError(f"{name}: {exc}") from None
            document, objects = transfer.bundle_export(bundle=bundle, actor=SYSTEM)
            for digest, data in objects.items():
                write_object(root, digest, data)
            write_document(root, document)
            versions += len(document["versions"])
        self.stdout.write(f"exported {len(names)} bundles, {versions} versions to {root}")
