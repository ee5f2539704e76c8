"""Session end against a session (L3) card registration: one lock order, session row then its
cards (registry.lifecycle.locks' docstring), on real PostgreSQL connections, one per thread.

The end locks the session and then deletes its cards; a registration used to lock the cards
first and take the foreign key's share lock on the session only at commit, so each waited for
the other (PostgreSQL's deadlock detector then failed one), and a registration that ran
behind an end added a card to the ended session."""

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from core.errors import SessionEnded
from sessions_app.models import Session
from sessions_app.services import session_end, session_start, session_use
from skills.models import SessionSkill
from skills.services import session_skill_register

pytestmark = pytest.mark.django_db(transaction=True)


def _card(name: str) -> dict[str, str]:
    return {"name": name, "summary": "A card.", "description": "What it does.", "source": "test"}


def _threads(*work: Callable[[], None], seconds: float = 20) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001  (reported to the test)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds)
    assert not any(t.is_alive() for t in threads), "a thread is still waiting"
    return errors


def _session_with_a_card(bundle, agent) -> Session:
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    session_skill_register(session=session_use(session_id=session.pk, actor=agent.actor), data=_card("first"))
    return session


def test_an_end_waits_for_a_registration_that_holds_the_cards(bundle, production, v1, agent):
    session = _session_with_a_card(bundle, agent)
    registered = threading.Event()

    def register() -> None:
        with transaction.atomic():  # commits only once the end is under way
            session_skill_register(session=session_use(session_id=session.pk, actor=agent.actor), data=_card("second"))
            registered.set()
            time.sleep(0.5)

    def end() -> None:
        assert registered.wait(10)
        session_end(session=session_use(session_id=session.pk, actor=agent.actor), actor=agent.actor)

    assert _threads(register, end) == []
    assert Session.objects.get(pk=session.pk).status == "ended"
    assert not SessionSkill.objects.filter(session_id=session.pk).exists(), "the end deletes every card"


def test_a_registration_behind_an_end_finds_the_session_ended(bundle, production, v1, agent):
    session = _session_with_a_card(bundle, agent)
    live = session_use(session_id=session.pk, actor=agent.actor)  # read before the end, as a request would
    ending = threading.Event()

    def end() -> None:
        with transaction.atomic():
            session_end(session=session_use(session_id=session.pk, actor=agent.actor), actor=agent.actor)
            ending.set()
            time.sleep(0.5)

    def register() -> None:
        assert ending.wait(10)
        session_skill_register(session=live, data=_card("second"))

    errors = _threads(end, register)
    assert [type(e) for e in errors] == [SessionEnded], errors
    assert not SessionSkill.objects.filter(session_id=session.pk).exists(), "no card on an ended session"


def test_ends_and_registrations_run_together_many_times(bundle, production, v1, agent):
    for _ in range(30):
        session = _session_with_a_card(bundle, agent)
        live = session_use(session_id=session.pk, actor=agent.actor)
        go = threading.Barrier(2)

        def register(live: Session = live, go: threading.Barrier = go) -> None:
            go.wait(5)
            for n in range(3):
                try:
                    session_skill_register(session=live, data=_card(f"more_{n}"))
                except SessionEnded:
                    return

        def end(live: Session = live, go: threading.Barrier = go) -> None:
            go.wait(5)
            session_end(session=live, actor=agent.actor)

        assert _threads(register, end) == []
        assert not SessionSkill.objects.filter(session_id=session.pk).exists()
