"""Concurrent turn calls of one session reporting the same previous turn (skills/turn_state.py,
skills/turn_batch.py): each report's metric is counted from the `invoked` its write replaced,
so the counts add up to the last report's, as sequential reports (or the locked
skill_turn_report) leave them, and never to one per report. Both write paths: alone, inside
the caller's transaction, and batched with the process's other turns."""

import threading
from collections import Counter

import pytest
from django.db import connection, transaction

from core.errors import Conflict
from metrics import usage
from sessions_app.models import Session
from skills import turn_state
from skills.models import SkillTurn
from tests.turns.test_turn import World, user

_COUNTERS = ("reported_turns", "invocations", "invocation_hits", "decided_turns", "decision_errors", "invalid_loads")
_INVOKED = [["refund_order"], ["refund_order", "lookup_one"], [], ["lookup_one", "lookup_two", "lookup_three"]]
_CALLS = 8


def _counts(version_id: int) -> Counter[str]:
    return Counter({name: usage.pending(version_id, name) for name in _COUNTERS})


def _race(session_id: str, *, alone: bool) -> list[BaseException]:
    """_CALLS turn calls, each planned on the same read (turn 1 not reported yet), then written
    together: each reports turn 1 with its own invoked list."""
    planned_all = threading.Barrier(_CALLS, timeout=30)
    errors: list[BaseException] = []

    def call(n: int) -> None:
        try:
            session = Session.objects.select_related("version", "bundle").get(pk=session_id)
            state = turn_state._read(session)
            planned = turn_state.plan(
                session=session, messages=[user(f"turn {n}")], invoked=_INVOKED[n % len(_INVOKED)], k=3, state=state
            )
            planned_all.wait()
            if alone:
                with transaction.atomic():
                    turn_state.write(session=session, planned=planned, turns=state.turns)
            else:
                turn_state.write(session=session, planned=planned, turns=state.turns)
        except Conflict as exc:  # too many numbers taken meanwhile: refused, rolled back or never counted
            errors.append(exc)
        except BaseException as exc:  # noqa: BLE001 (reported by the caller)
            errors.append(exc)
            planned_all.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(n,)) for n in range(_CALLS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("alone", [True, False], ids=["alone", "batched"])
def test_concurrent_reports_of_one_turn_count_as_sequential_ones(monkeypatch, alone):
    world = World(monkeypatch)
    world.turn({"messages": [user("I want a refund")]})
    version_id = SkillTurn.objects.get(session_id=world.session, number=1).version_id
    start = _counts(version_id)
    errors = _race(world.session, alone=alone)
    assert all(isinstance(e, Conflict) for e in errors), errors
    assert len(errors) < _CALLS, errors
    counted = _counts(version_id)
    counted.subtract(start)
    row = SkillTurn.objects.get(session_id=world.session, number=1)
    assert row.invoked in _INVOKED
    # what sequential reports leave: the last one's contribution, the earlier ones taken back
    assert dict(counted) == _contribution_of(row), (row.invoked, counted)


def _contribution_of(row: SkillTurn) -> dict[str, int]:
    loaded = {*row.resident, *row.routed, *row.session_skills}
    invoked = row.invoked or []
    wrong = any(name not in loaded for name in invoked)
    return {
        "reported_turns": 1,
        "invocations": len(invoked),
        "invocation_hits": sum(1 for name in invoked if name in loaded),
        "decided_turns": 1 if invoked else 0,
        "decision_errors": 1 if invoked and wrong else 0,
        "invalid_loads": sum(1 for name in row.routed if name not in set(invoked)),
    }
