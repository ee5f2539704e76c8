"""The turn call's reads of the session's per-turn state in one round trip (issue 42): the
skills' state (skills.turn_state: the two latest turns, the L3 cards) and the knowledge reads
(knowledge.render.turn_reads: the listed packs' states, the reads whose file changed since),
each app's own statement, sent together in psycopg's pipeline mode through server-side binding
(prepared once per connection, as the fast lane's batch reads are; DB_PREPARED_STATEMENTS=0
turns that off). Errors come out as Django's database errors, as from a Django cursor."""

from typing import Any

import psycopg
from django.db import connection

from knowledge.render import TurnReads, turn_reads_of, turn_reads_query
from sessions_app.models import Session
from skills import turn_state


def read_state(session: Session, names: list[str]) -> tuple[turn_state.State, TurnReads | None]:
    """The skills' state and, when `names` lists packs, the knowledge reads for them."""
    queries: list[tuple[str, Any]] = [turn_state.read_query(session)]
    if names:
        queries.append(turn_reads_query(session, names))
    with connection.wrap_database_errors:
        connection.ensure_connection()
        conn = connection.connection
        results = []
        with conn.pipeline():
            cursors = [psycopg.Cursor(conn) for _ in queries]
            for cursor, (sql, params) in zip(cursors, queries, strict=True):
                cursor.execute(sql, params, prepare=True)
            for cursor in cursors:
                results.append(cursor.fetchall())
                cursor.close()
    state = turn_state.state_of(session, results[0])
    return state, turn_reads_of(results[1]) if names else None
