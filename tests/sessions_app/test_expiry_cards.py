"""An expired session's L3 cards go with it, in the transaction that expires it (the sweep, or
the fetch that finds the lease ran out), as an end deletes them."""

from datetime import timedelta

from django.utils import timezone

from sessions_app.models import Session
from sessions_app.services import session_expire_lapsed, session_start, session_use
from sessions_app.sweep import sessions_sweep
from skills.models import SessionSkill
from skills.services import session_skill_register


def _card(name: str) -> dict[str, str]:
    return {"name": name, "summary": "A card.", "description": "What it does.", "source": "test"}


def _lapsed_with_cards(bundle, agent, cards: int = 2) -> Session:
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    live = session_use(session_id=session.pk, actor=agent.actor)
    for n in range(cards):
        session_skill_register(session=live, data=_card(f"card_{n}"))
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    return session


def test_the_sweep_deletes_the_cards_of_the_sessions_it_expires(bundle, production, v1, agent):
    lapsed = _lapsed_with_cards(bundle, agent)
    alive, _ = session_start(bundle=bundle, actor=agent.actor)
    session_skill_register(session=session_use(session_id=alive.pk, actor=agent.actor), data=_card("kept"))
    assert sessions_sweep() == {"expired": 1, "drained": 0}
    assert Session.objects.get(pk=lapsed.pk).status == "expired"
    assert not SessionSkill.objects.filter(session_id=lapsed.pk).exists()
    assert list(SessionSkill.objects.filter(session_id=alive.pk).values_list("name", flat=True)) == ["kept"]


def test_expiring_one_lapsed_session_deletes_its_cards(bundle, production, v1, agent):
    lapsed = _lapsed_with_cards(bundle, agent, cards=1)
    assert session_expire_lapsed(session_ids=[lapsed.pk]) == 1
    assert not SessionSkill.objects.filter(session_id=lapsed.pk).exists()
