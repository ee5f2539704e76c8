"""The batched turn write's plan (skills/turn_batch.py) finds its rows by their keys whatever the
tables held when the statement was prepared. A prepared statement runs on a generic plan once
PostgreSQL judges it no worse than a custom one; the rows JSON gives (json_to_recordset) count as
a hundred for the planner, so a plan made while skills_skillturn or skills_sessionskill was
small joined them by hashing a whole-table scan, and kept doing so on that connection as the
table grew: every batch read every turn of every session (measured: 0.6 ms of PostgreSQL per
write at 1,700 turns, growing with them). docs/performance.md, "Fourth pass"."""

import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from psycopg import ClientCursor

from skills.models import SkillTurn
from skills.turn_batch import _WRITE_MANY_SQL
from tests.turns.test_turn import World, user


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


def _generic_plan(turns: list[dict], cards: list[dict], lapsed: list[int]) -> str:
    sql = _WRITE_MANY_SQL.replace("%(turns)s", "$1").replace("%(cards)s", "$2").replace("%(lapsed)s", "$3")
    connection.ensure_connection()
    with ClientCursor(connection.connection) as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("PREPARE turn_write_plan(text, text, text) AS " + sql)
        params = (json.dumps(turns), json.dumps(cards), json.dumps(lapsed))
        cursor.execute("EXPLAIN (COSTS off) EXECUTE turn_write_plan(%s::text, %s::text, %s::text)", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE turn_write_plan")
    return plan


def test_the_batch_write_finds_its_rows_by_key_whatever_the_tables_held(world):
    """Planned generically with a few thousand rows in each table (where the whole-table plans
    were chosen), the write reads no table whole. (On a table of a page or two a scan is the
    cheaper plan, and kept until the connection is replaced: DB_CONN_MAX_AGE, 60 s.)"""
    rows = 3_000
    world.turn({"messages": [user("I want a refund for order 42")], "k": 3})
    turn = SkillTurn.objects.get(session_id=world.session)
    with connection.cursor() as cursor:  # other sessions' turns and cards, then fresh statistics
        cursor.execute(
            "INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills,"
            " latency_us, created_at) SELECT %s, %s, 1000 + g, '[]', '[]', '[]', 1, now()"
            " FROM generate_series(1, %s) g",
            [world.session, turn.version_id, rows],
        )
        cursor.execute(
            "INSERT INTO skills_sessionskill (session_id, name, summary, description, source, registered_turn,"
            " created_at) SELECT %s, 'card-' || g, '', '', 'test', 1, now() FROM generate_series(1, %s) g",
            [world.session, rows],
        )
        cursor.execute("ANALYZE skills_skillturn")
        cursor.execute("ANALYZE skills_sessionskill")
    now = datetime.now(UTC).isoformat()
    turns = [
        {"s": world.session, "report": True, "previous": 1, "invoked": "[]", "version": turn.version_id,
         "number": 2, "resident": "[]", "routed": "[]", "session_skills": "[]", "latency": 1, "now": now}
    ]  # fmt: skip
    plan = _generic_plan(turns, [{"s": world.session, "name": "card-1", "previous": 1}], [1, 2])
    assert "Seq Scan on skills_skillturn" not in plan, plan
    assert "Seq Scan on skills_sessionskill" not in plan, plan
    assert "skill_turn_unique_number" in plan, plan  # the reported turn by its key
