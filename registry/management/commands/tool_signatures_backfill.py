"""manage.py tool_signatures_backfill: index the tools of versions that have none indexed (those
the previous release published during a rolling upgrade) and settle their signatures."""

from typing import Any

from django.core.management.base import BaseCommand

from registry import lifecycle


class Command(BaseCommand):
    help = "Index the tool signatures of versions published without them (after a rolling upgrade)."

    def handle(self, *args: Any, **options: Any) -> None:
        indexed = lifecycle.tool_edges_backfill()
        self.stdout.write(f"{indexed} version(s) indexed")
