"""The turn call's skill state on one read and one write (skills/turn_state.py, turns/state.py):
the same rows as the route and report calls leave (the session's own cards kept alive by an
invocation, lapsing after SESSION_SKILL_IDLE_TURNS), a turn number taken meanwhile retried, and
the statements of a warm turn counted where psycopg sends them (the turn's reads go out
together, on their own cursors, which Django's query log does not see)."""

import json
from typing import Any

import psycopg
import pytest

from sessions_app.models import Session
from skills import turn_state
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill, SkillTurn
from tests.turns.test_turn import World, tool_exchange, user


@pytest.fixture
def world(db, monkeypatch) -> World:
    return World(monkeypatch)


def _card(name: str) -> dict[str, str]:
    return {"name": name, "summary": f"{name} summary", "description": f"Use {name} for this.", "source": "test"}


def _rows(session: str) -> tuple[list[Any], list[Any]]:
    turns = list(
        SkillTurn.objects.filter(session_id=session)
        .order_by("number")
        .values_list("number", "resident", "routed", "session_skills", "invoked")
    )
    cards = list(
        SessionSkill.objects.filter(session_id=session)
        .order_by("name")
        .values_list("name", "registered_turn", "last_invoked_turn")
    )
    return turns, cards


def test_the_session_cards_live_and_lapse_as_with_route_and_report(world):
    """Two sessions, the same turns: one through the turn call, the other through route and
    turns; a card invoked now and then stays, one never invoked lapses, on both alike."""
    twin = world.start()
    for session in (world.session, twin):
        for name in ("kept_card", "idle_card"):
            response = world.agent.post(f"/api/v1/sessions/{session}/skills/", _card(name))
            assert response.status_code == 201, response.content
    messages = [user("I want a refund for order 42")]
    for n in range(1, SESSION_SKILL_IDLE_TURNS + 4):
        invoked = ["kept_card", "refund_order"] if n % 3 == 0 else []
        body: dict[str, Any] = {"messages": [*messages, *tool_exchange(n), user(f"and now {n}?")], "k": 3}
        one = world.turn({**body, "invoked": invoked} if n > 1 else body)
        if n > 1:
            reported = world.call("turns", {"turn": n - 1, "invoked": invoked}, twin)
            assert one["reported"] == {"turn": reported["turn"], "invoked": reported["invoked"]}
        routed = world.call("route", body, twin)
        assert one["turn"] == routed["turn"] == n
        assert one["skills"]["session"] == routed["session"]
    assert _rows(world.session) == _rows(twin)
    names = [name for name, _, _ in _rows(world.session)[1]]
    assert names == ["kept_card"]  # the idle one lapsed on both


def test_a_turn_number_taken_meanwhile_is_retried_with_the_next(world):
    world.turn({"messages": [user("I want a refund")]})
    session = Session.objects.select_related("version", "bundle").get(pk=world.session)
    state = turn_state._read(session)
    planned = turn_state.plan(session=session, messages=[user("again")], invoked=["refund_order"], k=3, state=state)
    assert planned.skills.route["turn"] == 2
    SkillTurn.objects.create(session=session, version=session.version, number=2, latency_us=1)  # a concurrent call
    written = turn_state.write(session=session, planned=planned, turns=state.turns)
    assert written.route["turn"] == 3
    assert list(SkillTurn.objects.filter(session=session).values_list("number", flat=True).order_by("number")) == [
        1,
        2,
        3,
    ]
    assert SkillTurn.objects.get(session=session, number=1).invoked == ["refund_order"]


def test_a_warm_turn_reads_in_one_round_trip_and_writes_in_one_statement(world, monkeypatch):
    messages = [user("I want a refund for order 42"), *tool_exchange(1), user("and the invoice?")]
    world.turn({"messages": messages, "format": "anthropic"})
    sent: list[tuple[str, bool]] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        sent.append((str(query).strip().split()[0].upper(), self.connection._pipeline is not None))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    world.turn({"messages": messages, "format": "anthropic", "invoked": ["refund_order"]})
    statements = [(verb, piped) for verb, piped in sent if verb not in ("SAVEPOINT", "RELEASE")]
    turn_reads = [s for s in statements if s[1]]
    # the turn's own: the skills' state and the knowledge reads, pipelined; one write (a CTE)
    assert len(turn_reads) == 2, statements
    assert statements[-1] == ("WITH", False), statements
    # before them, the Django lane's key and session reads (the fast lane reads both in one)
    assert len(statements) <= 5, statements


@pytest.mark.django_db(transaction=True)
def test_concurrent_turns_are_written_in_batches_each_with_its_number(monkeypatch):
    """Turns finishing while a write runs are written together in one statement; a second turn
    of the same session waits for the next batch; each turn answers its own number, and what is
    left behind is what one-by-one writes leave."""
    import threading

    from django.db import connection

    from skills import turn_batch

    world = World(monkeypatch)
    sessions = [world.start() for _ in range(4)]
    for session in sessions:
        world.turn({"messages": [user("I want a refund")]}, session)
    batches: list[int] = []
    write_many = turn_batch.write_many
    first = threading.Event()

    def held(items):
        batches.append(len(items))
        if len(batches) == 1:  # the first batch waits until the other turns are queued behind it
            first.set()
            for _ in range(500):
                if len(turn_batch._batcher._waiting) >= 4:
                    break
                threading.Event().wait(0.01)
        return write_many(items)

    monkeypatch.setattr(turn_batch, "write_many", held)
    numbers: dict[int, int] = {}
    errors: list[BaseException] = []

    def take(n: int, session_id: str) -> None:
        try:
            session = Session.objects.select_related("version", "bundle").get(pk=session_id)
            state = turn_state._read(session)
            planned = turn_state.plan(
                session=session, messages=[user(f"turn {n}")], invoked=["refund_order"], k=3, state=state
            )
            if n:
                first.wait(10)
            numbers[n] = turn_state.write(session=session, planned=planned, turns=state.turns).route["turn"]
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    # five turns: one per session, and a second one on the first session
    threads = [threading.Thread(target=take, args=(n, s)) for n, s in enumerate([*sessions, sessions[0]])]
    threads[0].start()
    first.wait(10)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert batches[0] == 1 and sum(batches) == 5 and len(batches) <= 3, batches
    assert max(batches[1:]) >= 2, batches  # the queued turns went together
    assert sorted(numbers[n] for n in (0, 4)) == [2, 3]  # the same session: the next number
    assert [numbers[n] for n in (1, 2, 3)] == [2, 2, 2]
    for session in sessions:
        rows = SkillTurn.objects.filter(session_id=session).order_by("number")
        assert rows.first().invoked == ["refund_order"]
        assert [r.number for r in rows] == list(range(1, rows.count() + 1))


def _counting_wait(trips: list[str], sent: list[str]):
    """psycopg's wait (psycopg.waiting.wait_poll's loop), counting the waits in which the
    server's answer arrived (the socket became readable): one per round trip. Sending alone (a
    pipeline queueing its statements) reads nothing: PostgreSQL answers a pipeline once it gets
    its Sync. An answer read in several steps within one wait counts once."""
    import select

    from psycopg import waiting

    masks = {waiting.Wait.R: select.POLLIN, waiting.Wait.W: select.POLLOUT}

    def wait(gen, fileno, interval=0.0, timeout=None):
        answered = False
        poll = select.poll()
        try:
            s = next(gen)
            poll.register(fileno, masks.get(s, select.POLLIN | select.POLLOUT))
            while True:
                events = poll.poll(30_000)
                event = events[0][1] if events else 0
                readable = bool(event & (select.POLLIN | select.POLLERR | select.POLLHUP))
                answered = answered or readable
                ready = (waiting.Ready.R if readable else 0) | (waiting.Ready.W if event & select.POLLOUT else 0)
                s = gen.send(ready)
                poll.modify(fileno, masks.get(s, select.POLLIN | select.POLLOUT))
        except StopIteration as done:
            if answered:
                trips.append(f"after {len(sent)} statements")
            return done.value

    return wait


@pytest.mark.django_db(transaction=True)  # as served: autocommit (the fast lane releases its connection)
def test_a_warm_turn_through_the_fast_lane_is_two_round_trips(monkeypatch):
    """The fast lane's warm turn: the key, the session and the session's per-turn state in one
    round trip (api.fastlane with turns.state's prefetch), the write in the other; counted
    where psycopg waits for PostgreSQL's answer."""
    world = World(monkeypatch)
    from psycopg import waiting

    from api import fastlane
    from api.routes import BY_NAME
    from edge import http

    messages = [user("I want a refund for order 42"), *tool_exchange(1), user("and the invoice?")]
    body = orjson_body({"messages": messages, "format": "anthropic", "invoked": ["refund_order"]})
    headers = {b"authorization": f"Bearer {world.agent.secret}".encode(), b"content-type": b"application/json"}

    def turn() -> dict[str, Any]:
        answer = fastlane.serve(route=BY_NAME["turn"], session_id=world.session, headers=headers, body=body)
        assert answer.status == 200, answer.body
        return json.loads(answer.body)

    world.turn({"messages": messages, "format": "anthropic"})  # a turn to report
    # Django's health check (a SELECT 1 round trip) runs at most once a second per thread
    # (edge.http.release_connection): not in the turn measured here.
    monkeypatch.setattr(http, "HEALTH_CHECK_EVERY", 3600.0)
    turn()  # warm: the connection, the prepared statements, what the process builds once
    first = turn()
    trips: list[str] = []
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        sent.append(" ".join(str(query).split()[:6]))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    monkeypatch.setattr(waiting, "wait", _counting_wait(trips, sent))
    second = turn()
    assert second["turn"] == first["turn"] + 1 and second["reported"]["invoked"] == ["refund_order"]
    assert len(trips) == 2, (trips, sent)
    assert sent[-1].startswith("WITH"), sent  # the write, last


def orjson_body(value: Any) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("guess", [(), ("elsewhere",), ("elsewhere", "ops")])
def test_the_fast_lane_answers_the_same_whatever_packs_it_prefetched(monkeypatch, guess):
    """The prefetch reads the packs the session's last turn read here (turns.state): missing
    ones are read after it, extra ones are left out, so the render gets the packs' states the
    Django lane reads, and the same prefix."""
    from api import fastlane
    from api.routes import BY_NAME
    from knowledge import render
    from turns import state

    world = World(monkeypatch)
    assert world.ops.post("/api/v1/knowledge/", {"name": "elsewhere"}).status_code == 201  # not listed
    twin = world.start()
    body = {"messages": [user("I want a refund for order 42")], "format": "anthropic"}
    headers = {b"authorization": f"Bearer {world.agent.secret}".encode(), b"content-type": b"application/json"}
    states: list[Any] = []
    prefix_for = render.prefix_for

    def seen(**kwargs):
        states.append(kwargs["states"])
        return prefix_for(**kwargs)

    monkeypatch.setattr(render, "prefix_for", seen)
    expected = world.turn(body, twin)
    monkeypatch.setitem(state._packs, world.session, guess)
    answer = fastlane.serve(route=BY_NAME["turn"], session_id=world.session, headers=headers, body=orjson_body(body))
    assert answer.status == 200, answer.body
    got = json.loads(answer.body)
    assert got["prefix_sha256"] == expected["prefix_sha256"]
    assert got["prefix"] == expected["prefix"] and got["tail"] == expected["tail"]
    assert states[0] and [name for name, _ in states[0]] == ["ops"]
    assert states[1] == states[0]
