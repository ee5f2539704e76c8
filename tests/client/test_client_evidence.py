"""The Python client passes the evidence on (issue 39): a turn's response or usage, the end's
outcome, scores; sync and asyncio alike, against a live registry."""

import asyncio
from types import SimpleNamespace

import pytest
from django.db.models import Sum
from promptreg import Registry
from promptreg.aio import AsyncRegistry

from evidence.models import EvidenceDay, Score, SessionOutcome
from tests.live import registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000, "latency_ms": 700}


class _Message(SimpleNamespace):
    """Stands for an SDK's pydantic answer: the client sends its model_dump(mode="json")."""

    def model_dump(self, mode: str = "python") -> dict:
        return {"type": "message", "model": "claude-sonnet-4-5", "content": [], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip


def test_the_sync_client_reports_usage_outcome_and_scores(registry_server, agent, production):  # noqa: F811
    with Registry(registry_server.url, agent.secret) as client:
        session = client.start_session("refunds")
        session.turn([{"role": "user", "content": "refund 42"}], usage=USAGE)
        session.turn([{"role": "user", "content": "refund 42"}], format="anthropic", response=_Message())
        assert session.score("thumbs", 1, source="user", id="t-1")["id"] == "t-1"
        session.end("resolved", reason="refunded")
    assert SessionOutcome.objects.get(session_id=session.id).status == "resolved"
    assert Score.objects.get(session_id=session.id).value == 1.0
    # the day's rows of the label (the outcome's shard, and the usage's once flushed) add up
    assert EvidenceDay.objects.filter(label="production").aggregate(n=Sum("resolved"))["n"] == 1


def test_the_asyncio_client_ends_with_an_outcome_and_scores(registry_server, agent, production):  # noqa: F811
    async def run() -> str:
        async with AsyncRegistry(registry_server.url, agent.secret) as client:
            session = await client.start_session("refunds")
            await session.score("judge.helpful", 0.5, source="judge")
            await session.end("escalated")
            return session.id

    session_id = asyncio.run(run())
    assert SessionOutcome.objects.get(session_id=session_id).status == "escalated"
