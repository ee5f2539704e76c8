"""What sessions report (issue 39, docs/api.md#evidence): the turn call's `response` and
`usage`, tool errors in `messages`, the end's `outcome` and named scores, on a real database;
each refusal a 4xx in the contract's shape with nothing written."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from access.models import Role
from core.errors import InvalidContent
from evidence import counts
from evidence.models import EvidenceDay, Score, ScoreDay, SessionOutcome
from evidence.pricing import price_of
from evidence.report import ToolResults, Usage, reported_usage, tool_results
from sessions_app.models import Session
from skills.models import SkillTurn
from tests.conftest import make_api
from tests.turns.test_turn import World, tool_exchange, user

# Provider answers in their own shapes, as their SDKs return them (fields per each API reference).
ANTHROPIC = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Done."}],
    "stop_reason": "end_turn",
    "usage": {
        "input_tokens": 100,
        "output_tokens": 50,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 300,
    },
}
OPENAI_CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4.1-2025-04-14",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 1024}},
}
OPENAI_RESPONSES = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-5",
    "status": "completed",
    "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
    "usage": {"input_tokens": 900, "output_tokens": 30, "input_tokens_details": {"cached_tokens": 512}},
}
BEDROCK = {
    "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 10, "outputTokens": 20, "cacheReadInputTokens": 800, "cacheWriteInputTokens": 0},
    "metrics": {"latencyMs": 640},
}
GEMINI = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 1500, "candidatesTokenCount": 12, "cachedContentTokenCount": 1024},
    "modelVersion": "gemini-2.5-flash",
}


def test_it_reads_usage_from_each_providers_own_fields():
    assert reported_usage("anthropic", ANTHROPIC, None) == Usage(
        input_tokens=2400,  # input_tokens excludes the cache reads and writes: added back
        output_tokens=50,
        cache_read_tokens=2000,
        cache_write_tokens=300,
        model="claude-sonnet-4-5-20250929",
        stop_reason="end_turn",
    )
    chat = reported_usage("openai-chat", OPENAI_CHAT, None)
    assert (chat.input_tokens, chat.cache_read_tokens, chat.stop_reason) == (1200, 1024, "stop")
    responses = reported_usage("openai-responses", OPENAI_RESPONSES, None)
    assert (responses.input_tokens, responses.cache_read_tokens, responses.model) == (900, 512, "gpt-5")
    bedrock = reported_usage("bedrock-converse", BEDROCK, None)
    assert (bedrock.input_tokens, bedrock.cache_read_tokens, bedrock.latency_ms) == (810, 800, 640)
    gemini = reported_usage("gemini", GEMINI, None)
    assert (gemini.input_tokens, gemini.cache_read_tokens, gemini.stop_reason) == (1500, 1024, "STOP")


def test_neutral_usage_wins_over_the_response_and_adds_latency():
    usage = reported_usage("openai-chat", OPENAI_CHAT, {"latency_ms": 1234, "model": "gpt-4.1"})
    assert (usage.latency_ms, usage.model, usage.input_tokens) == (1234, "gpt-4.1", 1200)
    assert reported_usage(None, None, {"input_tokens": 5, "output_tokens": 1}) == Usage(input_tokens=5, output_tokens=1)
    assert reported_usage(None, None, None) is None


@pytest.mark.parametrize(
    ("fmt", "response", "usage", "field"),
    [
        ("openai-chat", ANTHROPIC, None, "response"),  # another format than the request's
        ("anthropic", GEMINI, None, "response"),
        (None, ANTHROPIC, None, "response"),  # no format to read it by
        ("anthropic", "a string", None, "response"),
        (None, None, {"input_tokens": -1}, "usage.input_tokens"),
        (None, None, {"output_tokens": 10**12}, "usage.output_tokens"),
        (None, None, {"input_tokens": True}, "usage.input_tokens"),
        (None, None, {"input_tokens": 1.5}, "usage.input_tokens"),
        (None, None, {"latency_ms": -5}, "usage.latency_ms"),
        (None, None, {"input_tokens": 10, "cache_read_tokens": 11}, "usage"),
        (None, None, {"tokens": 1}, "usage.tokens"),
        (None, None, [1], "usage"),
        (
            "anthropic",
            {**ANTHROPIC, "usage": {"input_tokens": -3, "output_tokens": 1}},
            None,
            "response.usage.input_tokens",
        ),
    ],
)
def test_it_refuses_bad_reports_naming_the_field(fmt, response, usage, field):
    with pytest.raises(InvalidContent) as caught:
        reported_usage(fmt, response, usage)
    assert field in caught.value.details


def test_it_counts_the_tool_results_since_the_models_last_answer_in_each_format():
    anthropic = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x", "is_error": True}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "t", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": True},
                {"type": "tool_result", "tool_use_id": "c", "content": "ok"},
            ],
        },
    ]
    assert tool_results(anthropic) == ToolResults(results=2, errors=1)  # the first error is an old turn's
    bedrock = [
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "1", "name": "t", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "1", "content": [], "status": "error"}}]},
    ]
    assert tool_results(bedrock) == ToolResults(results=1, errors=1)
    gemini = [
        {"role": "model", "parts": [{"functionCall": {"name": "t", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "t", "response": {"error": "no such order"}}}]},
    ]
    assert tool_results(gemini) == ToolResults(results=1, errors=1)
    chat = [user("hi"), *tool_exchange(1)]
    assert tool_results(chat) == ToolResults(results=1, errors=0)
    chat[-1]["is_error"] = True
    assert tool_results(chat) == ToolResults(results=1, errors=1)


def test_it_prices_dated_and_bedrock_model_ids_and_knows_it_does_not_know_others(db):
    # One catalog: a dated id and Bedrock's spelling price as the model they name.
    assert price_of("claude-sonnet-4-5-20250929") == price_of("anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert price_of("claude-sonnet-4-6") is not None
    assert price_of("m-1") is None and price_of(None) is None


# --- through the API --------------------------------------------------------------------


@pytest.fixture
def world(db, monkeypatch) -> World:
    counts.flush()
    return World(monkeypatch)


def _day(world: World) -> EvidenceDay:
    session = Session.objects.get(pk=world.session)
    return EvidenceDay.objects.get(version_id=session.version_id, label="production")


def test_a_turn_with_a_response_adds_its_usage_cost_and_tool_errors_to_the_rollup(
    world, django_capture_on_commit_callbacks
):
    messages = [
        user("refund order 1"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "process_refund", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no", "is_error": True}]},
    ]
    with django_capture_on_commit_callbacks(execute=True):  # counted after the turn commits
        world.turn({"messages": messages, "format": "anthropic", "response": ANTHROPIC, "usage": {"latency_ms": 900}})
        world.turn({"messages": [user("hi")], "usage": {"input_tokens": 1000, "output_tokens": 10}})
    assert not EvidenceDay.objects.exists()  # nothing written per turn: counted in memory
    assert counts.flush() == 1
    day = _day(world)
    assert (day.usage_turns, day.input_tokens, day.output_tokens) == (2, 3400, 60)
    assert (day.cache_read_tokens, day.cache_write_tokens) == (2000, 300)
    assert (day.tool_results, day.tool_errors) == (1, 1)
    assert day.priced_turns == 2  # the first names its model; the second is priced as the pinned model
    # Priced by the model catalog: the first turn's 100 plain input tokens, 2,000 cache reads and
    # 300 writes at its model's prices; the second's 1,000 plain at the pinned model's.
    pinned = json.loads(bytes(Session.objects.get(pk=world.session).version.canonical))["model"]["name"]
    first = price_of(ANTHROPIC["model"]).cost(input_tokens=2400, output_tokens=50, cache_read=2000, cache_write=300)
    second = price_of(pinned).cost(input_tokens=1000, output_tokens=10, cache_read=0, cache_write=0)
    assert day.input_cost == pytest.approx(first[0] + second[0])
    assert day.output_cost == pytest.approx(first[1] + second[1])
    assert sum(day.latency_buckets) == 1


def test_a_bad_report_is_a_400_and_the_turn_changes_nothing(world, django_capture_on_commit_callbacks):
    before = SkillTurn.objects.count()
    for body in (
        {"messages": [user("x")], "format": "openai-chat", "response": ANTHROPIC},
        {"messages": [user("x")], "usage": {"input_tokens": -1}},
        {"messages": [user("x")], "usage": {"output_tokens": 10**12}},
    ):
        with django_capture_on_commit_callbacks(execute=True):
            response = world.agent.post(f"/api/v1/sessions/{world.session}/turn/", body)
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "validation_error"
    assert SkillTurn.objects.count() == before
    assert counts.flush() == 0


def test_an_end_records_its_outcome_once_and_refuses_another(world):
    path = f"/api/v1/sessions/{world.session}/end/"
    bad = world.agent.post(path, {"outcome": {"status": "great"}})
    assert bad.status_code == 400 and "outcome.status" in bad.json()["error"]["details"]
    assert Session.objects.get(pk=world.session).status == "active"  # nothing half-written
    assert world.agent.post(path, {"outcome": {"status": "resolved", "reason": "refunded"}}).status_code == 200
    assert world.agent.post(path, {"outcome": {"status": "resolved"}}).status_code == 200  # the same: a no-op
    conflict = world.agent.post(path, {"outcome": {"status": "failed"}})
    assert conflict.status_code == 409 and conflict.json()["error"]["details"]["outcome"]["status"] == "resolved"
    outcome = SessionOutcome.objects.get(session_id=world.session)
    assert (outcome.status, outcome.reason) == ("resolved", "refunded")
    day = _day(world)
    assert (day.outcomes, day.resolved, day.failed) == (1, 1, 0)
    assert world.agent.post(path).status_code == 200  # a plain end of an ended session, as before


def test_a_plain_end_then_a_late_outcome_is_recorded(world):
    path = f"/api/v1/sessions/{world.session}/end/"
    assert world.agent.post(path).status_code == 200
    assert world.agent.post(path, {"outcome": {"status": "abandoned"}}).status_code == 200
    assert _day(world).abandoned == 1


def test_scores_are_idempotent_by_id_scoped_to_the_key_and_closed_after_the_window(world):
    path = f"/api/v1/sessions/{world.session}/scores/"
    first = world.agent.post(path, {"name": "thumbs", "value": 1, "source": "user", "id": "fb-1"})
    assert first.status_code == 201, first.content
    again = world.agent.post(path, {"name": "thumbs", "value": 1, "source": "user", "id": "fb-1"})
    assert again.status_code == 200 and again.json()["id"] == "fb-1"
    assert world.agent.post(path, {"name": "judge.helpful", "value": 0.5}).status_code == 201
    rows = {r.name: (r.n, r.total) for r in ScoreDay.objects.all()}
    assert rows == {"thumbs": (1, 1.0), "judge.helpful": (1, 0.5)}
    for bad in ({"name": "", "value": 1}, {"name": "x", "value": "1"}, {"name": "x", "value": 1e12}, {"x": 1}):
        response = world.agent.post(path, bad)
        assert response.status_code == 400, (bad, response.content)
    stranger = make_api(Role.AGENT, name="t-stranger")
    assert stranger.post(path, {"name": "thumbs", "value": 0}).status_code == 404  # another key's session
    assert world.ops.post(path, {"name": "review", "value": 1, "source": "human"}).status_code == 201
    world.agent.post(f"/api/v1/sessions/{world.session}/end/")
    assert world.agent.post(path, {"name": "late", "value": 1}).status_code == 201  # within the window
    Session.objects.filter(pk=world.session).update(ended_at=timezone.now() - timedelta(days=8))
    closed = world.agent.post(path, {"name": "later", "value": 1})
    assert closed.status_code == 409 and closed.json()["error"]["details"]["window_days"] == 7
    assert Score.objects.filter(session_id=world.session).count() == 4
    assert json.loads(again.content)["value"] == 1.0


class _Span:
    def __init__(self) -> None:
        self.attributes: dict = {}
        self.events: list = []

    def set_attributes(self, attributes: dict) -> None:
        self.attributes.update(attributes)

    def set_attribute(self, name: str, value) -> None:
        self.attributes[name] = value

    def add_event(self, name: str, attributes: dict) -> None:
        self.events.append((name, attributes))

    def get_span_context(self):
        from types import SimpleNamespace

        return SimpleNamespace(is_valid=False)


def test_the_turn_span_carries_the_genai_usage_and_a_score_is_an_evaluation_event(world, monkeypatch):
    from types import SimpleNamespace

    from core import observe

    span = _Span()
    monkeypatch.setattr(observe, "_trace", SimpleNamespace(get_current_span=lambda: span))
    world.turn({"messages": [user("x")], "format": "anthropic", "response": ANTHROPIC})
    assert span.attributes["gen_ai.usage.input_tokens"] == 2400
    assert span.attributes["gen_ai.usage.output_tokens"] == 50
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 2000
    assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == 300
    assert span.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    world.agent.post(f"/api/v1/sessions/{world.session}/scores/", {"name": "thumbs", "value": 1, "source": "user"})
    assert (
        "gen_ai.evaluation.result",
        {
            "gen_ai.evaluation.name": "thumbs",
            "gen_ai.evaluation.score.value": 1.0,
            "registry.evaluation.source": "user",
        },
    ) in span.events
    assert span.attributes["gen_ai.prompt.name"] == "support"  # the pin, on the same span


def test_a_report_adds_no_statement_to_the_turn(world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    body = {"messages": [user("refund order 7")], "format": "anthropic"}
    world.turn(body)  # warm: the caches a first turn fills
    with CaptureQueriesContext(connection) as plain:
        world.turn(body)
    with CaptureQueriesContext(connection) as reported:
        world.turn({**body, "response": ANTHROPIC, "usage": {"latency_ms": 800}})
    assert len(reported.captured_queries) == len(plain.captured_queries)
