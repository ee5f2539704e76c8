"""The admin shows the evidence: the version page and the move confirmation page (issue 39)."""

from evidence.services import OutcomeIn, session_end_outcome
from sessions_app.services import session_start
from tests.adminui.test_adminui_views import ops_user, reader, split_post, u, words  # noqa: F401 (fixtures)


def test_the_version_page_and_the_move_confirmation_show_the_evidence(
    reader,  # noqa: F811
    ops_user,  # noqa: F811
    bundle,
    v1,
    v2,
    production,
    agent,
):
    for status in ("resolved", "resolved", "failed"):
        session, _ = session_start(bundle=bundle, actor=agent.actor)
        session_end_outcome(session=session, actor=agent.actor, outcome=OutcomeIn(status=status, reason=""))
    page = words(reader.get(u("adminui_version", "refunds", 1)))
    assert "Evidence from production" in page
    assert "Sessions 0 with turn calls, 3 ended with an outcome" in page
    assert "Outcome: resolved 66.7 % (" in page and "n = 3" in page
    assert "Outcome: escalated 0.0 %" in page
    response = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "ship"})
    confirm = words(response)
    assert "Evidence of the version the label leaves" in confirm and "Outcome: resolved 66.7 %" in confirm
    assert "Evidence of the version it moves to" in confirm


def test_the_drain_view_shows_a_versions_final_evidence(reader, bundle, v1, v2, production, agent, ops):  # noqa: F811
    from registry.services import label_move

    session, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end_outcome(session=session, actor=agent.actor, outcome=OutcomeIn(status="resolved", reason=""))
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    data = reader.get(u("adminui_drain_json")).json()
    versions = {v["number"]: v for v in data["bundles"][0]["versions"]}
    assert versions[1]["state"] == "drained"
    assert versions[1]["evidence_text"].startswith("resolved 100.0 % (")
    assert "n = 1" in versions[1]["evidence_text"]
    assert "resolved 100.0 %" in words(reader.get(u("adminui_drain")))


def test_the_split_confirmation_shows_each_arms_evidence(ops_user, bundle, v1, v2, production, agent):  # noqa: F811
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end_outcome(session=session, actor=agent.actor, outcome=OutcomeIn(status="failed", reason=""))
    response = ops_user.post(u("adminui_move", "refunds"), split_post([("1", "90"), ("2", "10")], allow_breaking="on"))
    page = words(response)
    assert "Evidence on production: resolved 0.0 % (" in page and "n = 1" in page  # v1's, through production
    assert "Evidence on production: no reports" in page  # v2 has none yet
