"""The evidence and compare answers (docs/api.md#evidence), from the rollups that the reporting
services write, on a real database: every figure with its n, intervals, verdicts."""

import pytest

from evidence import counts, stats
from evidence.models import EvidenceDay
from evidence.report import ToolResults, Usage
from evidence.services import OutcomeIn, ScoreIn, score_record, session_end_outcome, turn_usage_delta
from registry.services import label_move
from sessions_app.services import session_start


def run_sessions(bundle, agent, *, n: int, resolved_share: dict[int, float]) -> dict[int, int]:
    """n sessions on `production` (split), each with one priced turn, ended with an outcome whose
    resolved share per version is `resolved_share`; a thumbs score per session. Sessions per version."""
    seen: dict[int, int] = {}
    for i in range(n):
        session, _ = session_start(bundle=bundle, actor=agent.actor, routing_key=f"user-{i}")
        number = session.version.number
        k = seen.get(number, 0)
        seen[number] = k + 1
        usage = Usage(input_tokens=1000 + 10 * (i % 7), output_tokens=100, cache_read_tokens=800, latency_ms=500)
        delta = turn_usage_delta(
            usage=usage, tools=ToolResults(results=2, errors=i % 2), default_model="claude-sonnet-4-5", first=True
        )
        counts.record(session.version_id, session.label, delta)
        # deterministic: the first resolved_share of each version's sessions resolve
        status = "resolved" if (k % 10) < resolved_share[number] * 10 else "failed"
        session_end_outcome(session=session, actor=agent.actor, outcome=OutcomeIn(status=status, reason=""))
        score = ScoreIn(
            name="thumbs", value=1.0 if status == "resolved" else 0.0, source="user", comment="", client_id=None
        )
        score_record(session=session, actor=agent.actor, score=score)
    counts.flush()
    return seen


@pytest.fixture
def split(bundle, ops, production, v2):
    label_move(
        bundle=bundle, name="production", targets=[(production.version, 50), (v2, 50)], actor=ops.actor, reason="ab"
    )
    counts.flush()


def test_the_evidence_of_a_version_says_each_figures_n_and_interval(bundle, split, agent, ops):
    seen = run_sessions(bundle, agent, n=200, resolved_share={1: 0.8, 2: 0.5})
    answer = ops.get("/api/v1/bundles/refunds/versions/1/evidence/?label=production")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["sessions"] == {"with_turns": seen[1], "ended_with_outcome": seen[1]}
    resolved = body["outcomes"]["resolved"]
    assert resolved["n"] == seen[1] and resolved["value"] == pytest.approx(0.8, abs=0.02)
    low, high = resolved["interval"]
    assert low < resolved["value"] < high
    assert body["scores"]["thumbs"]["n"] == seen[1]
    assert body["cache"]["read_share"]["value"] == pytest.approx(800 / 1030, abs=0.005)  # 800 of ~1,030
    assert body["cost_usd"]["unpriced_turns"] == 0 and body["cost_usd"]["per_turn"]["n"] == seen[1]
    assert body["tool_errors"]["n"] == 2 * seen[1]
    assert body["latency_ms"]["n"] == seen[1] and 400 < body["latency_ms"]["p50"] < 650
    assert body["turns_per_session"] == {"n": seen[1], "value": 1.0}
    # the same numbers read from the rollups only: per version and day here, at most one row per
    # outcome shard (evidence.counts), whatever the number of sessions
    assert EvidenceDay.objects.values("version", "label", "day").distinct().count() == 2
    assert EvidenceDay.objects.count() <= 2 * counts.OUTCOME_SHARDS


def test_compare_finds_the_worse_arm_and_says_not_enough_data_when_small(bundle, split, agent, ops):
    run_sessions(bundle, agent, n=20, resolved_share={1: 0.8, 2: 0.5})
    small = ops.get("/api/v1/bundles/refunds/evidence/compare/?label=production").json()
    assert small["metrics"]["outcome.resolved"]["verdict"] == stats.NOT_ENOUGH
    run_sessions(bundle, agent, n=300, resolved_share={1: 0.8, 2: 0.5})
    body = ops.get("/api/v1/bundles/refunds/evidence/compare/?label=production").json()
    assert (body["a"], body["b"]) == ({"version": 1, "label": "production"}, {"version": 2, "label": "production"})
    resolved = body["metrics"]["outcome.resolved"]
    assert resolved["verdict"] == stats.WORSE and resolved["difference"] == pytest.approx(-0.3, abs=0.05)
    assert resolved["interval"][1] < 0
    assert body["metrics"]["outcome.failed"]["verdict"] == stats.WORSE  # more failures: lower is better
    assert body["metrics"]["score.thumbs"]["verdict"] == stats.WORSE
    assert body["metrics"]["tool_error_rate"]["verdict"] == stats.NO_DIFFERENCE
    same = ops.get("/api/v1/bundles/refunds/evidence/compare/?a=1&b=1").json()
    assert same["metrics"]["outcome.resolved"]["verdict"] == stats.NO_DIFFERENCE


def test_bad_queries_are_400_in_the_contracts_shape(bundle, split, ops, agent):
    for query in ("?a=1", "?a=x&b=2", "?a=1&b=2&since=yesterday", "?a=0&b=1"):
        response = ops.get(f"/api/v1/bundles/refunds/evidence/compare/{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]["code"] == "validation_error"
    assert ops.get("/api/v1/bundles/refunds/evidence/compare/?a=1&b=9").status_code == 404
    label_move(bundle=bundle, name="staging", version=bundle.versions.get(number=1), actor=ops.actor, reason="s")
    assert ops.get("/api/v1/bundles/refunds/evidence/compare/?label=staging").status_code == 400
    assert ops.get("/api/v1/bundles/refunds/versions/1/evidence/?until=2020-13-01").status_code == 400
    empty = ops.get("/api/v1/bundles/refunds/versions/2/evidence/?since=2020-01-01&until=2020-01-02").json()
    assert empty["outcomes"]["resolved"] == {"n": 0, "value": None, "interval": None}


def test_retention_prunes_the_raw_rows_with_their_sessions_and_keeps_the_rollups(bundle, production, agent):
    from datetime import timedelta

    from django.utils import timezone

    from evidence.models import Score, ScoreDay, SessionOutcome
    from retention.services import prune
    from sessions_app.models import Session

    session, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end_outcome(session=session, actor=agent.actor, outcome=OutcomeIn(status="resolved", reason=""))
    score = ScoreIn(name="thumbs", value=1.0, source="user", comment="", client_id="a")
    score_record(session=session, actor=agent.actor, score=score)
    Session.objects.filter(pk=session.pk).update(ended_at=timezone.now() - timedelta(days=400))
    prune()
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not SessionOutcome.objects.exists() and not Score.objects.exists()
    assert EvidenceDay.objects.get().resolved == 1 and ScoreDay.objects.get().n == 1
