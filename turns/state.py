"""The turn call's reads of the session's per-turn state in one round trip (issue 42): the
skills' state (skills.turn_state: the two latest turns, the L3 cards) and the knowledge reads
(knowledge.render.turn_reads: the listed packs' states, the reads whose file changed since),
each app's own statement, sent together (core.pipelined).

The fast lane sends them with its key read (api.fastlane, `prefetch` below), so that a warm
turn reads in one round trip and writes in one. The skills' read needs only the session's id;
the knowledge read names the packs the pinned version lists and the key reaches, which are
known only once the key and the session are read. So the prefetch reads the packs the
session's previous turn in this process read (or, for a session new to the process, the
previous turn's of any session): the read covers a superset of what is needed or it is not
used, and the packs it lacks are read then (one more round trip, the first turn of a session
in a process whose pinned version lists other packs). Nothing read is kept: the packs' names
are only which rows to ask for, and every answer is built from rows read after the call
arrived; the prefetch is used only for the session it was read for, once the fast lane has
decided the key may make the call."""

from dataclasses import dataclass
from typing import Any

from core.pipelined import Rows, read_pipelined
from knowledge.render import TurnReads, turn_reads_of, turn_reads_query
from sessions_app.models import Session
from skills import turn_state

# The packs the last turn of each session read here (bounded: emptied when full; a miss costs
# a round trip, not a wrong answer) and the last turn's of any session.
_PACKS_MAX = 100_000
_packs: dict[str, tuple[str, ...]] = {}
_last: list[tuple[str, ...]] = [()]


@dataclass(frozen=True)
class Prefetch:
    """The per-turn state of one session, read with the fast lane's key read."""

    session_id: str
    packs: tuple[str, ...]  # the packs whose states the knowledge read asked for
    queries: list[tuple[str, Any]]
    rows: tuple[Rows, ...] = ()  # each query's rows, once read

    def read(self, rows: list[Rows]) -> "Prefetch":
        return Prefetch(self.session_id, self.packs, self.queries, tuple(rows))


def prefetch(session_id: str) -> Prefetch:
    """The reads to send with the key read of a turn on `session_id` (the id as the path gave it)."""
    packs = _packs.get(session_id, _last[0])
    queries: list[tuple[str, Any]] = [turn_state.read_query(session_id)]
    if packs:
        queries.append(turn_reads_query(session_id, list(packs)))
    return Prefetch(session_id, packs, queries)


def _remember(session_id: str, names: list[str]) -> None:
    packs = tuple(names)
    if _packs.get(session_id) != packs:
        if len(_packs) >= _PACKS_MAX:
            _packs.clear()
        _packs[session_id] = packs
    _last[0] = packs


def _knowledge_rows(rows: Rows, names: list[str]) -> Rows:
    """The knowledge read's rows as a read of `names` alone would give them: the pack states
    of those packs (the read asked for more), the session's changed reads (all of them, whatever
    the names: turn_reads reads them so)."""
    wanted = set(names)
    return [row for row in rows if row[0] != "s" or row[1] in wanted]


def read_state(
    session: Session, names: list[str], prefetched: Prefetch | None = None
) -> tuple[turn_state.State, TurnReads | None]:
    """The skills' state and, when `names` lists packs, the knowledge reads for them: from
    `prefetched` when it was read for this session and covers `names`, else read here."""
    session_id = str(session.pk)
    _remember(session_id, names)
    if prefetched is not None and prefetched.rows and prefetched.session_id == session_id:
        skills = prefetched.rows[0]
        if not names:
            return turn_state.state_of(session, skills), None
        if set(names) <= set(prefetched.packs):
            knowledge = _knowledge_rows(prefetched.rows[1], names)
        else:
            knowledge = read_pipelined([turn_reads_query(session_id, names)])[0]
        return turn_state.state_of(session, skills), turn_reads_of(knowledge)
    queries: list[tuple[str, Any]] = [turn_state.read_query(session_id)]
    if names:
        queries.append(turn_reads_query(session_id, names))
    results = read_pipelined(queries)
    state = turn_state.state_of(session, results[0])
    return state, turn_reads_of(results[1]) if names else None
