"""manage.py prune [--dry-run] [--older-than DURATION] [--batch N]: delete what is past its
retention (retention.services.prune), printing per table what it deletes (or, with --dry-run,
would delete) and how long each batch took (the longest any of its row locks was held)."""

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from retention.services import prune

_DURATION = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `1d12h`, `90m`, `45s`."""
    text = text.strip().lower()
    if not text or _DURATION.sub("", text) or len(text) > 32:
        raise CommandError(f"--older-than: {text!r} is not a duration such as 30d, 12h or 1d12h.")
    total = timedelta()
    for amount, unit in _DURATION.findall(text):
        total += timedelta(**{_UNITS[unit]: int(amount)})
    return total


class Command(BaseCommand):
    help = "Delete sessions, turns, file reads, deliveries, rollups and audit events past their retention."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
        parser.add_argument(
            "--older-than",
            help="one retention for every table instead of the RETENTION_* settings (audit events keep"
            " at least RETENTION_AUDIT_DAYS)",
        )
        parser.add_argument("--batch", type=int, help="rows per batch to start with (default PRUNE_BATCH)")

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = parse_duration(options["older_than"]) if options["older_than"] else None
        if options["batch"] is not None and not 1 <= options["batch"] <= 100_000:
            raise CommandError("--batch must be 1 to 100000.")
        results = prune(dry_run=options["dry_run"], older_than=older_than, batch=options["batch"])
        self.stdout.write("would delete (dry run):" if options["dry_run"] else "deleted:")
        for result in results:
            self.stdout.write("  " + result.line())
