"""Skill triggers are publisher-written regexes run on every turn's end-user text (issue 18):
Python's `re` took 3 s on `(a+)+$` and 25 characters while holding the GIL, freezing the whole
worker. Publishing refuses what RE2 cannot run; routing runs triggers on RE2; a version published
before the rule routes with such a trigger treated as never matching."""

import copy
import logging
import time

import pytest

from registry import skills_content as skill_content
from registry.skills_content import MAX_TRIGGER_PROGRAM_TOTAL, content_errors
from skills.router import Index
from tests.skills.test_skills import SKILLS, card, skills_content

EVIL_TEXT = "a" * 25 + "!"  # 3 s for `(a+)+$` on Python's re; each extra "a" doubles it


def _with_trigger(*triggers: str) -> list[dict]:
    skills = copy.deepcopy(SKILLS)
    skills[1]["triggers"] = list(triggers)  # refund_order
    return skills


@pytest.mark.parametrize(
    ("trigger", "said"),
    [
        (r"(\w+) \1", "backreferences"),
        ("(?P<w>x)(?P=w)", "backreferences"),
        ("refund(?! later)", "negative lookahead"),
        ("(?<=order )\\d+", "lookbehind"),
        ("(?x) refund", "verbose mode"),
        ("(?:\\w{1,20}\\s?){30}", "too large to run"),
        ("(" * 9 + "x" + ")" * 9, "nests groups 9 deep"),
    ],
)
def test_publishing_refuses_a_trigger_re2_cannot_run(ops, trigger, said):
    ops.post("/api/v1/bundles/", {"name": "support", "description": "d"})
    response = ops.post(
        "/api/v1/bundles/support/versions/", {"message": "m", "content": skills_content(_with_trigger(trigger))}
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    [message] = error["details"]["content.skills[1].triggers[0]"]
    assert said in message, message


def test_publishing_refuses_triggers_that_together_cost_too_much_per_turn():
    heavy = "(?:[a-z]{1,6}\\d){10}"  # 424 instructions: under one trigger's bound, 60 of them over the total
    skills = [
        card(f"skill_{i}", "Use when testing", "general", ["a", "b", "c"], ["x y", "y z"], triggers=[heavy] * 10)
        for i in range(6)
    ]
    errors = dict(content_errors({"skills": skills}))
    assert "skills" in errors and f"at most {MAX_TRIGGER_PROGRAM_TOTAL}" in errors["skills"], errors


@pytest.mark.timeout(30)
def test_a_nested_quantifier_trigger_routes_in_linear_time():
    index = Index(_with_trigger("(a+)+$", "(a|aa)+$"))
    began = time.monotonic()
    for _ in range(20):
        result = index.route([{"role": "user", "content": EVIL_TEXT * 150}])  # 3,900 characters
    assert time.monotonic() - began < 1
    assert "refund_order" not in [r["name"] for r in result.routed]
    hit = index.route([{"role": "user", "content": "refund aaaa"}])
    assert "trigger" in next(r["why"] for r in hit.routed if r["name"] == "refund_order")


def test_a_version_published_before_the_rule_routes_and_says_which_trigger_never_matches(caplog):
    caplog.set_level(logging.WARNING, logger="skills.router")
    index = Index(_with_trigger(r"(\w)\1", "refund(?=now)", r"\bOTPX\b"))
    assert sum("never matches" in r.getMessage() for r in caplog.records) == 2  # once, at the index build
    caplog.clear()
    # "aa" would match (\w)\1 on a backtracking engine; here the trigger never matches.
    result = index.route([{"role": "user", "content": "I want my money back, refund aa now, OTPX"}])
    why = next(r["why"] for r in result.routed if r["name"] == "refund_order")
    assert "2 trigger(s) not run" in why and "trigger;" in why  # the one RE2 runs still matched
    assert not caplog.records  # logged once per index, not per turn


def test_a_version_published_before_the_rule_routes_through_the_api(ops, agent, monkeypatch):
    ops.post("/api/v1/bundles/", {"name": "legacy", "description": "d"})
    # Published as the code before the rule would have: every trigger Python's re compiles.
    monkeypatch.setattr(skill_content, "trigger_problem", lambda pattern: None)
    monkeypatch.setattr(skill_content, "trigger_program_size", lambda pattern: 0)
    doc = skills_content(_with_trigger(r"(\w+) \1", "(a+)+$"))
    assert ops.post("/api/v1/bundles/legacy/versions/", {"message": "m", "content": doc}).status_code == 201
    monkeypatch.undo()
    session = agent.post("/api/v1/sessions/", {"bundle": "legacy", "version": 1}).json()["id"]
    began = time.monotonic()
    response = agent.post(f"/api/v1/sessions/{session}/route/", {"messages": [{"role": "user", "content": EVIL_TEXT}]})
    assert response.status_code == 200, response.content
    assert time.monotonic() - began < 2
