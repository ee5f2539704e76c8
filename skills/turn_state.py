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
skill_route retries it. Inside the caller's transaction: a later refusal rolls it all back."""

import time
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection
from django.utils import timezone

from core import instruments
from core.errors import Conflict, InvalidContent
from sessions_app.models import Session
from skills import services
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill
from skills.router import History, index_for
from skills.selectors import session_content

_READ_SQL = """
SELECT 't', t.number, t.version_id, t.resident::text, t.routed::text, t.session_skills::text, t.invoked::text,
       t.expected::text, NULL::bigint, NULL, NULL, NULL, NULL, NULL::integer, NULL::integer
FROM (SELECT * FROM skills_skillturn WHERE session_id = %(s)s ORDER BY number DESC LIMIT 2) t
UNION ALL
SELECT 'c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, c.id, c.name, c.summary, c.description, c.source,
       c.registered_turn, c.last_invoked_turn
FROM skills_sessionskill c WHERE c.session_id = %(s)s
"""

_WRITE_SQL = """
WITH reported AS (
    UPDATE skills_skillturn SET invoked = %(invoked)s::jsonb, expected = NULL, reported_at = %(now)s
    WHERE %(report)s AND session_id = %(s)s AND number = %(previous)s RETURNING 1
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
       (SELECT number FROM turn)
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


def _json(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _read(session: Session) -> tuple[list[_Turn], list[SessionSkill]]:
    """The session's two latest turns (newest first) and its L3 cards, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(_READ_SQL, {"s": session.pk})
        rows = cursor.fetchall()
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
    return turns, cards


def _write(session: Session, values: dict[str, Any]) -> int:
    """The report, the lapsed cards and the new turn in one statement; the turn's number."""
    with connection.cursor() as cursor:
        cursor.execute(_WRITE_SQL, values)
        written = cursor.fetchone()[3]
        for _attempt in range(2):  # a concurrent call took the number: the next one, as skill_route
            if written is not None:
                break
            cursor.execute(_NEXT_SQL, [session.pk])
            values["number"] = cursor.fetchone()[0]
            cursor.execute(_INSERT_SQL, values)
            found = cursor.fetchone()
            written = found[0] if found else None
    if written is None:
        raise Conflict("Too many concurrent route calls for this session; retry.")
    return int(written)


@dataclass(frozen=True)
class TurnSkills:
    reported: dict[str, Any] | None  # the report of the previous turn, as the turn call answers it
    route: dict[str, Any]  # as skill_route answers it
    session_cards: list[SessionSkill]  # the L3 cards the route lists, as skills.selectors.session_cards


def _report(turns: list[_Turn], cards: list[SessionSkill], invoked: list[str]) -> dict[str, Any] | None:
    """skill_turn_report's rules on what was read: the previous turn's invocations replaced,
    the invoked L3 cards kept alive. None: no turn to report (400 when something was invoked)."""
    if not turns:
        if invoked:
            raise InvalidContent(
                "There is no previous turn to report.", {"invoked": ["This session has no routed turn yet."]}
            )
        return None
    names = services.check_names(invoked, "invoked")
    row = turns[0]
    instruments.turn_reported(
        row.version_id,
        loaded={*row.resident, *row.routed, *row.session_skills},
        routed=list(row.routed),
        before=row.invoked,
        after=names,
        expected_before=row.expected,
        expected=None,
    )
    row.invoked, row.expected = names, None
    wanted = set(names)
    for card in cards:
        if card.name in wanted and not (card.last_invoked_turn is not None and card.last_invoked_turn >= row.number):
            card.last_invoked_turn = row.number
    return {"turn": row.number, "invoked": names}


def turn_skills(*, session: Session, messages: Any, invoked: list[str] | None, k: Any = None) -> TurnSkills:
    """Report (when `invoked` is given) and route, as skill_turn_report then skill_route would,
    on one read and one write."""
    messages = services.check_messages(messages)
    k = services.check_k(k)
    turns, cards = _read(session)
    reported = _report(turns, cards, invoked) if invoked is not None else None
    report = reported is not None
    content = session_content(session)
    history = History(
        loaded=[frozenset(t.routed) for t in turns],
        invoked=[frozenset(t.invoked) if t.invoked is not None else None for t in turns],
    )
    index = index_for(session.version.content_hash, content.get("skills") or [], services.route_embedder())
    started = time.perf_counter()
    result = index.route(messages, k=k, history=history)
    latency_us = int((time.perf_counter() - started) * 1_000_000)
    number = (turns[0].number if turns else 0) + 1
    lapsed = [c.pk for c in cards if number - c.last_active_turn > SESSION_SKILL_IDLE_TURNS]
    live = [c for c in cards if c.pk not in lapsed]
    routed = [r["name"] for r in result.routed]
    values = {
        "s": session.pk,
        "invoked": orjson.dumps(reported["invoked"] if reported else []).decode(),
        "now": timezone.now(),
        "report": report,
        "previous": reported["turn"] if reported else 0,
        "names": reported["invoked"] if reported else [],
        "lapsed": lapsed,
        "version": session.version_id,
        "number": number,
        "resident": orjson.dumps(result.resident).decode(),
        "routed": orjson.dumps(routed).decode(),
        "session_skills": orjson.dumps([c.name for c in live]).decode(),
        "latency": latency_us,
    }
    written = _write(session, values)
    instruments.turn_routed(session.version_id, number=written, latency_us=latency_us)
    names = [c.name for c in live]
    route = {
        "resident": result.resident,
        "routed": result.routed,
        "session": names,
        "categories": result.categories,
        "demoted": result.demoted,
        "turn": written,
    }
    return TurnSkills(reported=reported, route=route, session_cards=live)
