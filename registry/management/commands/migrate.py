"""`manage.py migrate` with bounded locks, for rolling upgrades (docs/operations.md, "Upgrades").

Django's own command, with every connection it uses set to `lock_timeout` and
`statement_timeout` first. An ALTER TABLE waiting for its ACCESS EXCLUSIVE lock behind a long
transaction makes every later query on that table wait behind it: with `lock_timeout` the
migration gives up after a moment instead, its transaction rolls back (each migration is
atomic), and the command tries again after a pause, from the first migration not yet applied.
`statement_timeout` bounds how long a lock that was taken is held by one statement: work that
needs longer (a backfill, an index on a big table) belongs in batches or CONCURRENTLY."""

import time
from typing import Any

import psycopg.errors
from django.conf import settings
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created


def _bound(connection: BaseDatabaseWrapper, **_: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {int(settings.MIGRATION_LOCK_TIMEOUT_MS)}")
        cursor.execute(f"SET statement_timeout = {int(settings.MIGRATION_STATEMENT_TIMEOUT_MS)}")


def _lock_not_available(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, psycopg.errors.LockNotAvailable)


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Each lock is waited for at most MIGRATION_LOCK_TIMEOUT_MS (then retried)."

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        connection_created.connect(_bound, dispatch_uid="bounded-migrate")
        try:
            if connection.connection is not None:  # already open: the signal will not fire for it
                _bound(connection)
            for attempt in range(settings.MIGRATION_LOCK_RETRIES + 1):
                try:
                    super().handle(*args, **options)
                    return
                except OperationalError as exc:
                    if not _lock_not_available(exc) or attempt == settings.MIGRATION_LOCK_RETRIES:
                        raise
                    pause = min(0.5 * 2**attempt, 10.0)
                    self.stderr.write(f"a migration waited too long for a lock ({exc}); again in {pause:.1f} s")
                    time.sleep(pause)
        finally:
            connection_created.disconnect(dispatch_uid="bounded-migrate")
            # A caller's session (pytest's) goes on with the timeouts it connected with.
            if connection.connection is not None:
                with connection.cursor() as cursor:
                    cursor.execute("RESET lock_timeout")
                    cursor.execute("RESET statement_timeout")
