"""The skills' part of a turn call on one read and one write (issue 42): the report of the
previous turn (skills.services.skill_turn_report's rules) and the route of this one
(skill_route's), with the session's own (L3) cards, as two SQL statements instead of eleven.

The read: the session's two latest turns and its L3 cards, in one statement. What the report
changes (the previous turn's `invoked`, the invoked cards' `last_invoked_turn`) is applied to
what was read, in memory, so the route reads the same history it read after the report's
writes before; the cards that lapse at the new turn are found the same way. The write: the
report's two updates, the lapsed cards' delete and the new turn's row, in one statement (data-
modifying CTEs: each touches other rows, so none needs to see another's effect). A turn number
taken by a concurrent call (the insert's conflict) is retried with the next free number, as
skill_route retries it. Inside the caller's transaction: a later refusal rolls it all back.

Concurrent reports of one turn (two turn calls of a session, both planned on the same read):
the report's UPDATE takes the previous turn's row lock first (`previous`: SELECT ... FOR
UPDATE, in the same statement) and returns the `invoked` and `expected` it replaced, as they
were committed when the lock was granted; the report's metric is counted from those, not from
the plan's read, so the counts of N reports of a turn add up to the last one's, as
skill_turn_report's select_for_update counted them. Lock order, here and in skills.turn_batch:
the reported turn's row (a batch: by session, then number), then the session's card rows
(updated, then the lapsed ones deleted), then the new turn's number (the insert's key)."""

import time
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from django.db import connection
from django.utils import timezone

from core import instruments
from core.errors import Conflict, InvalidContent
from sessions_app.models import Session
from skills import services, turn_batch
from skills.index_store import routing_index
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill
from skills.router import History
from skills.selectors import session_content
from skills.turn_batch import json_or_none as _json

READ_SQL = """
SELECT 't', t.number, t.version_id, t.resident::text, t.routed::text, t.session_skills::text, t.invoked::text,
       t.expected::text, NULL::bigint, NULL, NULL, NULL, NULL, NULL::integer, NULL::integer
FROM (SELECT * FROM skills_skillturn WHERE session_id = %(s)s ORDER BY number DESC LIMIT 2) t
UNION ALL
SELECT 'c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, c.id, c.name, c.summary, c.description, c.source,
       c.registered_turn, c.last_invoked_turn
FROM skills_sessionskill c WHERE c.session_id = %(s)s
"""

_WRITE_SQL = """
WITH previous AS (
    SELECT id, invoked::text AS invoked, expected::text AS expected FROM skills_skillturn
    WHERE %(report)s AND session_id = %(s)s AND number = %(previous)s FOR UPDATE
), reported AS (
    UPDATE skills_skillturn t SET invoked = %(invoked)s::jsonb, expected = NULL, reported_at = %(now)s
    FROM previous WHERE t.id = previous.id RETURNING previous.invoked, previous.expected
), cards AS (
    UPDATE skills_sessionskill SET last_invoked_turn = %(previous)s
    WHERE %(report)s AND session_id = %(s)s AND name = ANY(%(names)s::text[])
      AND NOT (last_invoked_turn >= %(previous)s AND last_invoked_turn IS NOT NULL) RETURNING 1
), lapsed AS (
    DELETE FROM skills_sessionskill WHERE id = ANY(%(lapsed)s::bigint[]) RETURNING 1
), turn AS (
    INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills, invoked,
                                  expected, latency_us, created_at, reported_at)
    VALUES (%(s)s, %(version)s, %(number)s, %(resident)s::jsonb, %(routed)s::jsonb, %(session_skills)s::jsonb,
            NULL, NULL, %(latency)s, %(now)s, NULL)
    ON CONFLICT (session_id, number) DO NOTHING RETURNING number
)
SELECT (SELECT count(*) FROM reported), (SELECT count(*) FROM cards), (SELECT count(*) FROM lapsed),
       (SELECT number FROM turn), (SELECT invoked FROM reported), (SELECT expected FROM reported)
"""

_NEXT_SQL = "SELECT COALESCE(MAX(number), 0) + 1 FROM skills_skillturn WHERE session_id = %s"
_INSERT_SQL = """
INSERT INTO skills_skillturn (session_id, version_id, number, resident, routed, session_skills, invoked, expected,
                              latency_us, created_at, reported_at)
VALUES (%(s)s, %(version)s, %(number)s, %(resident)s::jsonb, %(routed)s::jsonb, %(session_skills)s::jsonb,
        NULL, NULL, %(latency)s, %(now)s, NULL)
ON CONFLICT (session_id, number) DO NOTHING RETURNING number
"""


@dataclass
class _Turn:
    number: int
    version_id: int
    resident: list[str]
    routed: list[str]
    session_skills: list[str]
    invoked: list[str] | None
    expected: list[str] | None


def read_query(session_id: Any) -> tuple[str, dict[str, Any]]:
    """The read, for a caller that sends it with others in one round trip (turns.state)."""
    return READ_SQL, {"s": session_id}


@dataclass(frozen=True)
class State:
    turns: list[_Turn]  # the two latest, newest first
    cards: list[SessionSkill]  # by name


def state_of(session: Session, rows: list[tuple[Any, ...]]) -> State:
    """The rows of READ_SQL as the session's two latest turns and its L3 cards."""
    turns = [
        _Turn(r[1], r[2], _json(r[3]), _json(r[4]), _json(r[5]), _json(r[6]), _json(r[7])) for r in rows if r[0] == "t"
    ]
    turns.sort(key=lambda t: -t.number)
    cards = [
        SessionSkill(
            id=r[8],
            session_id=session.pk,
            name=r[9],
            summary=r[10],
            description=r[11],
            source=r[12],
            registered_turn=r[13],
            last_invoked_turn=r[14],
        )
        for r in rows
        if r[0] == "c"
    ]
    cards.sort(key=lambda c: c.name)  # the model's ordering
    return State(turns=turns, cards=cards)


def _read(session: Session) -> State:
    """The session's two latest turns and its L3 cards, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(READ_SQL, {"s": session.pk})
        return state_of(session, cursor.fetchall())


def _write(session: Session, values: dict[str, Any]) -> tuple[int, tuple[Any, Any] | None]:
    """The report, the lapsed cards and the new turn in one statement (server-side binding,
    prepared once per connection like the fast lane's reads); the turn's number and what the
    report replaced."""
    with connection.wrap_database_errors:
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(_WRITE_SQL, values, prepare=True)
            found = cursor.fetchone()
            written = found[3] if found else None
            replaced = turn_batch.replaced(found[4], found[5]) if found and found[0] else None
            for _attempt in range(2):  # a concurrent call took the number: the next one, as skill_route
                if written is not None:
                    break
                cursor.execute(_NEXT_SQL, [session.pk])
                found = cursor.fetchone()
                values["number"] = found[0] if found else 1
                cursor.execute(_INSERT_SQL, values)
                found = cursor.fetchone()
                written = found[0] if found else None
    if written is None:
        raise Conflict("Too many concurrent route calls for this session; retry.")
    return int(written), replaced


@dataclass(frozen=True)
class TurnSkills:
    reported: dict[str, Any] | None  # the report of the previous turn, as the turn call answers it
    route: dict[str, Any]  # as skill_route answers it
    session_cards: list[SessionSkill]  # the L3 cards the route lists (session_skills_list's rows named by the route)


@dataclass(frozen=True)
class Planned:
    """A turn's report and route, computed and not yet written (`write` writes it)."""

    skills: TurnSkills  # the route's "turn" is the number it will most likely get
    values: dict[str, Any]
    latency_us: int


def _report(turns: list[_Turn], cards: list[SessionSkill], invoked: list[str]) -> dict[str, Any] | None:
    """skill_turn_report's rules on what was read: the previous turn's invocations replaced,
    the invoked L3 cards kept alive. None: no turn to report (400 when something was invoked).
    Its metric is counted when the report is written."""
    if not turns:
        if invoked:
            raise InvalidContent(
                "There is no previous turn to report.", {"invoked": ["This session has no routed turn yet."]}
            )
        return None
    names = services.check_names(invoked, "invoked")
    row = turns[0]
    wanted = set(names)
    for card in cards:
        if card.name in wanted and not (card.last_invoked_turn is not None and card.last_invoked_turn >= row.number):
            card.last_invoked_turn = row.number
    return {"turn": row.number, "invoked": names}


def plan(*, session: Session, messages: Any, invoked: list[str] | None, k: Any, state: State) -> Planned:
    """Report (when `invoked` is given) and route, as skill_turn_report then skill_route would,
    on the state read (`state_of`); nothing is written."""
    turns, cards = state.turns, state.cards
    reported = _report(turns, cards, invoked) if invoked is not None else None  # first, as before the route
    messages = services.check_messages(messages)
    k = services.check_k(k)
    if reported is not None:
        turns[0].invoked, turns[0].expected = reported["invoked"], None
    content = session_content(session)
    history = History(
        loaded=[frozenset(t.routed) for t in turns],
        invoked=[frozenset(t.invoked) if t.invoked is not None else None for t in turns],
    )
    index, routing = routing_index(session.version.content_hash, content.get("skills") or [], services.route_embedder())
    started = time.perf_counter()
    result = index.route(messages, k=k, history=history)
    latency_us = int((time.perf_counter() - started) * 1_000_000)
    number = (turns[0].number if turns else 0) + 1
    lapsed = [c.pk for c in cards if number - c.last_active_turn > SESSION_SKILL_IDLE_TURNS]
    live = [c for c in cards if c.pk not in lapsed]
    names = [c.name for c in live]
    values = {
        "s": session.pk,
        "invoked": orjson.dumps(reported["invoked"] if reported else []).decode(),
        "now": timezone.now(),
        "report": reported is not None,
        "previous": reported["turn"] if reported else 0,
        "names": reported["invoked"] if reported else [],
        "lapsed": lapsed,
        "version": session.version_id,
        "number": number,
        "resident": orjson.dumps(result.resident).decode(),
        "routed": orjson.dumps([r["name"] for r in result.routed]).decode(),
        "session_skills": orjson.dumps(names).decode(),
        "latency": latency_us,
    }
    route = {
        "resident": result.resident,
        "routed": result.routed,
        "session": names,
        "categories": result.categories,
        "demoted": result.demoted,
        "turn": number,
        "routing": routing,
    }
    return Planned(TurnSkills(reported=reported, route=route, session_cards=live), values, latency_us)


def _count_report(turns: list[_Turn], planned: Planned, replaced: tuple[Any, Any]) -> None:
    """The report's metric, from what its write replaced (not from what the turn's read saw:
    a concurrent report of the same turn may have come between them)."""
    reported = planned.skills.reported
    if reported is None:
        return
    row = turns[0]
    instruments.turn_reported(
        row.version_id,
        loaded={*row.resident, *row.routed, *row.session_skills},
        routed=list(row.routed),
        before=replaced[0],
        after=reported["invoked"],
        expected_before=replaced[1],
        expected=None,
    )


def write(*, session: Session, planned: Planned, turns: list[_Turn]) -> TurnSkills:
    """Write a planned turn in one statement (the report, the lapsed cards, the new turn),
    batched with the process's other turns, and count its metrics; the route's "turn" is the
    number written."""
    values = dict(planned.values)
    # with the other turns of this process that finish meanwhile (skills.turn_batch), unless
    # it must commit or roll back with the caller's transaction
    batched = None if connection.in_atomic_block else turn_batch.write_batched(values)
    if batched is not None and batched.replaced is not None:
        _count_report(turns, planned, batched.replaced)  # committed with its batch, whatever follows
        values["report"] = False
    written = batched.number if batched is not None else None
    if written is None:  # in a transaction, or the number was taken meanwhile
        written, replaced = _write(session, values)
        if replaced is not None:
            _count_report(turns, planned, replaced)
    instruments.turn_routed(session.version_id, number=written, latency_us=planned.latency_us)
    route = (
        planned.skills.route if written == planned.skills.route["turn"] else {**planned.skills.route, "turn": written}
    )
    return TurnSkills(reported=planned.skills.reported, route=route, session_cards=planned.skills.session_cards)


def turn_skills(*, session: Session, messages: Any, invoked: list[str] | None, k: Any = None) -> TurnSkills:
    """Report (when `invoked` is given) and route, as skill_turn_report then skill_route would,
    on one read and one write."""
    state = _read(session)
    planned = plan(session=session, messages=messages, invoked=invoked, k=k, state=state)
    return write(session=session, planned=planned, turns=state.turns)
