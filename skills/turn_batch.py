"""The turn writes of one web process, batched (issue 42): the turns that finish while another
turn's write is running are written together, in one statement and one commit, as the fast
lane batches the fetch's writes. A turn is answered once the statement that wrote it has
committed, so an acknowledged turn is as durable as one written alone.

The first turn to arrive with no batch running leads: it takes every turn waiting (one per
session: a second turn of the same session waits for the next batch, so that each batch's
statement touches a session's rows once), writes them on its own connection, wakes their
threads with their turn numbers, and hands the lead to the first turn still waiting. A turn
whose number a concurrent call took meanwhile (the insert's conflict) comes back as None, and
its thread writes it alone with skill_route's retry (skills.turn_state). A write inside a
transaction (a render that claims notices, a test's) is not batched: it must commit or roll
back with its transaction.

Each report locks its previous turn's row before writing it and returns what it replaced (the
metric is counted from that: skills.turn_state's docstring); a batch locks those rows in
(session, number) order, so two processes' batches that report the same sessions do not
deadlock on them, and its result rows come in the lock order (reported, cards, lapsed, turns).
A turn whose number was taken comes back with its report already written and committed: its
thread counts that report and writes the turn alone without it."""

import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from django.db import connection

# Every row found by its key (a lateral lookup per reported turn and per card, the rows to
# update or delete by id = ANY), never by joining the JSON rows with a table: the planner counts
# json_to_recordset's rows as a hundred, so a generic plan made while a table was small hashed
# a scan of all of it, and the connection kept that plan as the table grew
# (tests/turns/test_turn_write_plan.py).
_WRITE_MANY_SQL = """
WITH v AS (
    SELECT * FROM json_to_recordset(%(turns)s::json)
        AS v(s uuid, report boolean, previous integer, invoked text, version bigint, number integer, resident text,
             routed text, session_skills text, latency integer, now timestamptz)
), previous AS (
    SELECT t.id, t.session_id, t.invoked, t.expected
    FROM (SELECT s, previous FROM v WHERE report ORDER BY s, previous) r
    CROSS JOIN LATERAL (
        SELECT id, session_id, invoked::text AS invoked, expected::text AS expected FROM skills_skillturn
        WHERE session_id = r.s AND number = r.previous OFFSET 0 FOR UPDATE
    ) t
), reported AS (
    UPDATE skills_skillturn t SET invoked = v.invoked::jsonb, expected = NULL, reported_at = v.now
    FROM previous p JOIN v ON v.s = p.session_id
    WHERE t.id = ANY(ARRAY(SELECT id FROM previous)) AND t.id = p.id
    RETURNING p.session_id, p.invoked, p.expected
), card AS (
    SELECT k.id, p.previous FROM json_to_recordset(%(cards)s::json) AS p(s uuid, name text, previous integer)
    CROSS JOIN LATERAL (SELECT id FROM skills_sessionskill WHERE session_id = p.s AND name = p.name OFFSET 0) k
), cards AS (
    UPDATE skills_sessionskill c SET last_invoked_turn = k.previous FROM card k
    WHERE c.id = ANY(ARRAY(SELECT id FROM card)) AND c.id = k.id
      AND NOT (c.last_invoked_turn >= k.previous AND c.last_invoked_turn IS NOT NULL) RETURNING 1
), lapsed AS (
    DELETE FROM skills_sessionskill
    WHERE id = ANY(ARRAY(SELECT value::bigint FROM json_array_elements_text(%(lapsed)s::json))) RETURNING 1
), turn AS (
    INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills, invoked,
                                  expected, latency_us, created_at, reported_at)
    SELECT v.s, v.version, v.number, v.resident::jsonb, v.routed::jsonb, v.session_skills::jsonb, NULL, NULL,
           v.latency, v.now, NULL
    FROM v
    ON CONFLICT (session_id, number) DO NOTHING RETURNING session_id, number
)
SELECT 'r', session_id, invoked, expected FROM reported
UNION ALL SELECT 'c', NULL, count(*)::text, NULL FROM cards
UNION ALL SELECT 'l', NULL, count(*)::text, NULL FROM lapsed
UNION ALL SELECT 't', session_id, number::text, NULL FROM turn
"""

_COLUMNS = (
    *("s", "report", "previous", "invoked", "version", "number"),
    *("resident", "routed", "session_skills", "latency", "now"),
)
_MAX_BATCH = 64


@dataclass(frozen=True)
class Written:
    """What a turn's write did: its number (None: taken meanwhile), and the reported turn's
    `invoked` and `expected` as the report found them (None: no report written)."""

    number: int | None
    replaced: tuple[Any, Any] | None


def json_or_none(text: str | None) -> Any:
    """A jsonb column read as text, parsed (None stays None)."""
    return None if text is None else orjson.loads(text)


def replaced(invoked: str | None, expected: str | None) -> tuple[Any, Any]:
    """The replaced row's jsonb columns, as text, parsed."""
    return json_or_none(invoked), json_or_none(expected)


def write_many(items: list[dict[str, Any]]) -> list[Written]:
    """Write planned turns (skills.turn_state.plan's values, sessions all different) in one
    statement on this thread's connection, committed on return (autocommit): each one's
    number and what its report replaced. The rows go as JSON, one parameter each (orjson writes
    the session's UUID and the aware datetime as PostgreSQL reads them): psycopg's dumping of
    fifteen array parameters cost more CPU than the rest of the write."""
    turns = [{name: item[name] for name in _COLUMNS} for item in items]
    cards = [
        {"s": item["s"], "name": name, "previous": item["previous"]}
        for item in items
        if item["report"]
        for name in item["names"]
    ]
    lapsed = [card_id for item in items for card_id in item["lapsed"]]
    params = {"turns": orjson.dumps(turns).decode(), "cards": orjson.dumps(cards).decode()}
    params["lapsed"] = orjson.dumps(lapsed).decode()
    with connection.wrap_database_errors:
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(_WRITE_MANY_SQL, params, prepare=True)
            rows = cursor.fetchall()
    numbers = {str(r[1]): int(r[2]) for r in rows if r[0] == "t"}
    reports = {str(r[1]): replaced(r[2], r[3]) for r in rows if r[0] == "r"}
    return [Written(numbers.get(str(item["s"])), reports.get(str(item["s"]))) for item in items]


@dataclass(eq=False)  # by identity: a batch is taken out of the waiting list
class _Waiting:
    values: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead the next batch, not with a result
    written: Written = field(default_factory=lambda: Written(None, None))
    error: BaseException | None = None


class _Batcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._leading = False

    def write(self, values: dict[str, Any]) -> Written:
        me = _Waiting(values)
        with self._lock:
            self._waiting.append(me)
            lead = not self._leading
            self._leading = True
        while not lead:
            me.done.wait()
            if not me.lead:
                break
            me.done.clear()
            lead, me.lead = True, False
        if lead:
            self._lead()
        if me.error is not None:
            raise me.error
        return me.written

    def _take(self) -> list[_Waiting]:
        with self._lock:
            batch: list[_Waiting] = []
            sessions: set[str] = set()
            for waiting in self._waiting:
                key = str(waiting.values["s"])
                if key not in sessions and len(batch) < _MAX_BATCH:
                    sessions.add(key)
                    batch.append(waiting)
            self._waiting = [w for w in self._waiting if w not in batch]
            return batch

    def _lead(self) -> None:
        batch = self._take()
        try:
            results = write_many([w.values for w in batch])
            for waiting, written in zip(batch, results, strict=True):
                waiting.written = written
        except BaseException as exc:  # every turn of the batch answers the error (a 503 for an outage)
            for waiting in batch:
                waiting.error = exc
        finally:
            with self._lock:
                following = self._waiting[0] if self._waiting else None
                self._leading = following is not None
                if following is not None:
                    following.lead = True
            for waiting in batch:
                waiting.done.set()
            if following is not None:
                following.done.set()


_batcher = _Batcher()


def write_batched(values: dict[str, Any]) -> Written:
    """The turn's write once its batch committed; its number None: taken meanwhile (write
    it alone, without the report, which the batch wrote)."""
    return _batcher.write(values)
