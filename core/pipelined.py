"""Several reads in one round trip: the statements sent together in psycopg's pipeline mode on
Django's connection, their rows fetched once the pipeline is synced (issue 42).

The rows are fetched after the pipeline block, not inside it: a fetch inside flushes and waits
for that statement's rows, then the block's exit waits again for the Sync, two round trips
where one does. Server-side binding, each statement prepared once per connection (as the fast
lane's batch reads are). Errors come out as Django's database errors, as from a Django cursor;
Django's health check runs first when it is due (edge.http.release_connection), as before a
Django cursor's first statement."""

from typing import Any

import psycopg
from django.db import connection

Rows = list[tuple[Any, ...]]


def read_pipelined(queries: list[tuple[str, Any]]) -> list[Rows]:
    """The rows of each (sql, params) in `queries`, in order, in one round trip."""
    with connection.wrap_database_errors:
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        conn = connection.connection
        cursors = [psycopg.Cursor(conn) for _ in queries]
        try:
            with conn.pipeline():
                for cursor, (sql, params) in zip(cursors, queries, strict=True):
                    cursor.execute(sql, params, prepare=True)
            return [cursor.fetchall() for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()
