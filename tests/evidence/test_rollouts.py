"""Issue 14: sticky percentage rollouts whose assignment is the pin, atomic releases across
bundles, and If-Match on labels; all over the REST API against real PostgreSQL."""

import json

import pytest

from registry.lifecycle import routing_bucket
from registry.models import Bundle, BundleVersion, Label
from registry.services import bundle_create, version_publish
from sessions_app.models import Session
from sessions_app.services import session_start
from tests.conftest import content

LABEL = "/api/v1/bundles/refunds/labels/production/"


def state(number: int, bundle: str = "refunds") -> str:
    return BundleVersion.objects.get(bundle__name=bundle, number=number).state


def start(agent, routing_key: str | None = None, bundle: str = "refunds") -> dict:
    body = {"bundle": bundle} | ({"routing_key": routing_key} if routing_key else {})
    response = agent.post("/api/v1/sessions/", body)
    assert response.status_code == 201, response.json()
    return response.json()


def start_many(agent, keys: list[str]) -> dict[str, int]:
    """Many sessions, through the service the endpoint calls (the API's write budget is 600/min)."""
    bundle = Bundle.objects.get(name="refunds")
    return {key: session_start(bundle=bundle, actor=agent.actor, routing_key=key)[0].version.number for key in keys}


def ramp(ops, weights: list[tuple[int, int]], reason: str = "ramp", **extra):
    targets = [{"version": v, "weight": w} for v, w in weights]
    return ops.put(LABEL, {"targets": targets, "reason": reason, **extra})


@pytest.fixture
def v3(bundle, ops, v2):
    return version_publish(bundle=bundle, content=content("Version three."), message="v3", actor=ops.actor).version


def test_a_ten_percent_ramp_is_sticky_per_routing_key_and_is_the_pin(agent, ops, production, v2):
    response = ramp(ops, [(1, 90), (2, 10)], reason="ramp v2 to 10%")
    assert response.status_code == 200, response.json()
    label = response.json()
    assert label["targets"] == [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}]
    assert label["version"] == 1  # the primary target: the largest weight
    assert state(2) == "live"

    users = [f"user-{i}" for i in range(400)]
    first = start_many(agent, users)
    assert start(agent, users[0])["version"] == first[users[0]]  # the API agrees with the service
    on_v2 = [user for user, version in first.items() if version == 2]
    assert 20 <= len(on_v2) <= 65  # about 10% of 400
    # The assignment is a pure function of the routing key: every later session of a user agrees.
    assert start_many(agent, users[:60]) == {user: first[user] for user in users[:60]}
    for user in users[:60]:
        expected = 2 if routing_bucket(bundle_name="refunds", label_name="production", routing_key=user) >= 90 else 1
        assert first[user] == expected
    # Without a routing key the session's own id decides: both versions get sessions.
    bundle = Bundle.objects.get(name="refunds")
    assert {session_start(bundle=bundle, actor=agent.actor)[0].version.number for _ in range(80)} == {1, 2}

    # Raising v2 to 50% moves only users from v1 to v2, never back, and no pinned session moves.
    pinned = {s.pk: s.version_id for s in Session.objects.all()}
    assert ramp(ops, [(1, 50), (2, 50)], reason="ramp v2 to 50%").status_code == 200
    second = start_many(agent, users)
    assert all(second[user] == 2 for user in on_v2)
    assert 140 <= sum(v == 2 for v in second.values()) <= 260
    assert {s.pk: s.version_id for s in Session.objects.filter(pk__in=pinned)} == pinned


def test_weights_that_drop_to_zero_keep_a_target_live_and_leaving_drains_it(agent, ops, production, v2):
    assert ramp(ops, [(1, 90), (2, 10)]).status_code == 200
    session = start(agent, "someone-on-v2")
    while session["version"] != 2:
        session = start(agent, f"x{session['id']}")
    assert ramp(ops, [(1, 100), (2, 0)], reason="pause the ramp").status_code == 200
    assert state(2) == "live"  # weight 0 is still a target
    assert set(start_many(agent, [f"u{i}" for i in range(30)]).values()) == {1}
    fetched = agent.get(f"/api/v1/sessions/{session['id']}/bundle/")
    assert fetched.status_code == 200 and json.loads(fetched.content)["version"] == 2  # the pin holds
    assert ops.put(LABEL, {"version": 1, "reason": "stop the ramp"}).status_code == 200
    assert state(2) == "draining"  # its session is still active
    agent.post(f"/api/v1/sessions/{session['id']}/end/")
    from registry.lifecycle import version_drain

    assert version_drain(version_id=BundleVersion.objects.get(number=2).pk)
    assert state(2) == "drained"


def test_rolling_back_a_ramp_sends_everyone_to_the_version_before_it(agent, ops, production, v2):
    assert ramp(ops, [(1, 75), (2, 25)]).status_code == 200
    back = ops.post(f"{LABEL}rollback/", {"reason": "v2 confuses the model"})
    assert back.status_code == 200, back.json()
    assert back.json()["targets"] == [{"version": 1, "weight": 100}]
    assert set(start_many(agent, [f"u{i}" for i in range(30)]).values()) == {1}
    assert state(2) == "drained"
    history = agent.get(f"{LABEL}history/").json()["results"]
    assert [(h["targets"], h["reason"]) for h in history] == [
        ([{"version": 1, "weight": 100}], "v2 confuses the model"),
        ([{"version": 1, "weight": 75}, {"version": 2, "weight": 25}], "ramp"),
        ([{"version": 1, "weight": 100}], "first release"),
    ]
    assert history[1]["by"] == ops.actor.name and "compatibility check passed" in history[1]["note"]


def test_compatibility_and_protection_apply_to_each_target(agent, publisher, ops, production, bundle):
    breaking = content("Refund with `issue_refund`.")
    breaking["tools"][0]["name"] = "issue_refund"
    v2 = version_publish(bundle=bundle, content=breaking, message="rename", actor=ops.actor).version
    refused = ramp(ops, [(1, 90), (v2.number, 10)])
    assert refused.status_code == 409 and refused.json()["error"]["details"]["level"] == "major"
    assert Label.objects.get(name="production").targets == []
    assert ramp(publisher, [(1, 90), (2, 10)]).status_code == 403  # production is protected
    allowed = ramp(ops, [(1, 90), (2, 10)], allow_breaking=True)
    assert allowed.status_code == 200
    note = agent.get(f"{LABEL}history/").json()["results"][0]["note"]
    assert note.startswith("v2: breaking change allowed")
    # Changing only the weights does not judge v2 again: it was judged (and allowed) when it joined.
    assert ramp(ops, [(1, 50), (2, 50)]).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"targets": [{"version": 1, "weight": 60}, {"version": 2, "weight": 30}], "reason": "r"},
        {"targets": [{"version": 1, "weight": 50}, {"version": 1, "weight": 50}], "reason": "r"},
        {"targets": [{"version": 1, "weight": 101}], "reason": "r"},
        {"targets": [{"version": 1, "weight": 50.5}, {"version": 2, "weight": 49.5}], "reason": "r"},
        {"targets": [], "reason": "r"},
        {"version": 1, "targets": [{"version": 1, "weight": 100}], "reason": "r"},
        {"reason": "no target"},
        {"targets": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10, "colour": "red"}], "reason": "r"},
    ],
)
def test_bad_splits_are_400_and_change_nothing(ops, production, v2, body):
    before = Label.objects.get(name="production").revision
    response = ops.put(LABEL, body)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "validation_error"
    assert Label.objects.get(name="production").revision == before


def test_a_put_with_targets_creates_a_label_already_split(ops, production, v2):
    """A split may create its label: the API's contract, and the admin's move page agrees
    (tests/adminui/test_adminui_views.py). Creating is not judged (nobody is on the label yet); later
    moves of the label are, against its primary target."""
    body = {"targets": [{"version": 1, "weight": 80}, {"version": 2, "weight": 20}], "reason": "a/b from the start"}
    response = ops.put("/api/v1/bundles/refunds/labels/canary/", body)
    assert response.status_code == 201, response.json()
    assert response.json()["targets"] == [{"version": 1, "weight": 80}, {"version": 2, "weight": 20}]
    assert response.json()["version"] == 1 and response["ETag"] == '"rev-1"'
    # The release dry run previews a change of it with the same preview the admin shows.
    dry = ops.post(
        "/api/v1/releases/",
        {
            "moves": [{"bundle": "refunds", "label": "canary", "version": 2}],
            "reason": "all in",
            "dry_run": True,
        },
    )
    assert dry.status_code == 200, dry.json()
    move = dry.json()["moves"][0]
    assert move["current"]["targets"] == [{"version": 1, "weight": 80}, {"version": 2, "weight": 20}]
    assert move["leaving"] == [{"version": 1, "starts_draining": False, "active_sessions": 0}]  # production keeps v1
    assert move["compatibility"] == [] and move["allowed"] is True


def test_a_split_naming_a_version_that_does_not_exist_is_404(ops, production):
    assert ramp(ops, [(1, 90), (7, 10)]).status_code == 404


def test_if_match_refuses_a_move_based_on_a_stale_read(agent, ops, production, v2, v3):
    read = ops.get(LABEL)
    etag = read["ETag"]
    assert etag == '"rev-1"' and read.json()["revision"] == 1
    # Someone else moves the label in the meantime...
    moved = ops.put(LABEL, {"version": 2, "reason": "ship v2"}, HTTP_IF_MATCH=etag)
    assert moved.status_code == 200 and moved["ETag"] == '"rev-2"'
    # ...so a move decided on the first read is refused, with the state it would overwrite.
    stale = ops.put(LABEL, {"version": 3, "reason": "ship v3"}, HTTP_IF_MATCH=etag)
    assert stale.status_code == 412
    error = stale.json()["error"]
    assert error["code"] == "precondition_failed"
    assert error["details"]["current"]["version"] == 2 and error["details"]["current"]["etag"] == '"rev-2"'
    assert Label.objects.get(name="production").version.number == 2
    assert ops.post(f"{LABEL}rollback/", {"reason": "back"}, HTTP_IF_MATCH=etag).status_code == 412
    assert ops.put(LABEL, {"version": 3, "reason": "r"}, HTTP_IF_MATCH='"something-else"').status_code == 412
    assert ops.put(LABEL, {"version": 3, "reason": "ship v3"}, HTTP_IF_MATCH='W/"rev-2", "rev-9"').status_code == 200
    # `*` means "only if it exists": fine here, 412 for a label that does not exist.
    assert ops.put(LABEL, {"version": 2, "reason": "r"}, HTTP_IF_MATCH="*").status_code == 200
    staging = ops.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "r"}, HTTP_IF_MATCH="*")
    assert staging.status_code == 412 and not Label.objects.filter(name="staging").exists()
    # A policy change is a change of the label too.
    before = ops.get(LABEL)["ETag"]
    ops.put(LABEL, {"version": 2, "reason": "relax", "compatibility": "none"})
    assert ops.get(LABEL)["ETag"] != before


@pytest.fixture
def billing(ops, db):
    bundle = bundle_create(name="billing", actor=ops.actor)
    first = version_publish(bundle=bundle, content=content("Billing one."), message="b1", actor=ops.actor).version
    version_publish(bundle=bundle, content=content("Billing two."), message="b2", actor=ops.actor)
    ops.put("/api/v1/bundles/billing/labels/production/", {"version": first.number, "reason": "first"})
    return bundle


def release_body(reason: str = "ship refunds v2 with billing v2", **extra) -> dict:
    return {
        "moves": [
            {"bundle": "refunds", "label": "production", "version": 2},
            {
                "bundle": "billing",
                "label": "production",
                "targets": [{"version": 1, "weight": 80}, {"version": 2, "weight": 20}],
            },
        ],
        "reason": reason,
        **extra,
    }


def test_an_atomic_release_moves_two_bundles_and_rolls_back_as_a_whole(agent, ops, production, v2, billing):
    preview = ops.post("/api/v1/releases/", release_body(dry_run=True))
    assert preview.status_code == 200, preview.json()
    impact = {m["bundle"]: m for m in preview.json()["moves"]}
    assert impact["refunds"]["becomes_live"] == [{"version": 2, "weight": 100}]
    assert impact["refunds"]["leaving"] == [{"version": 1, "starts_draining": True, "active_sessions": 0}]
    assert impact["billing"]["leaving"] == [] and all(m["allowed"] for m in impact.values())
    assert Label.objects.get(bundle__name="refunds", name="production").version.number == 1  # nothing moved

    applied = ops.post("/api/v1/releases/", release_body())
    assert applied.status_code == 201, applied.json()
    release = applied.json()
    assert [(i["bundle"], i["after"]["targets"]) for i in release["items"]] == [
        ("refunds", [{"version": 2, "weight": 100}]),
        ("billing", [{"version": 1, "weight": 80}, {"version": 2, "weight": 20}]),
    ]
    assert state(1) == "drained" and state(2, "billing") == "live"
    for bundle in ("refunds", "billing"):
        history = agent.get(f"/api/v1/bundles/{bundle}/labels/production/history/").json()["results"]
        assert history[0]["release"] == release["id"]
    assert agent.get(f"/api/v1/releases/{release['id']}/").json()["items"] == release["items"]

    back = ops.post(f"/api/v1/releases/{release['id']}/rollback/", {"reason": "billing v2 fails"})
    assert back.status_code == 201, back.json()
    assert back.json()["rollback_of"] == release["id"]
    assert Label.objects.get(bundle__name="refunds", name="production").version.number == 1
    assert Label.objects.get(bundle__name="billing", name="production").targets == []
    assert state(2, "billing") == "drained"
    again = ops.post(f"/api/v1/releases/{release['id']}/rollback/", {"reason": "twice"})
    assert again.status_code == 409


def test_a_release_applies_all_or_nothing(ops, production, v2, billing):
    body = release_body()
    body["moves"][1]["targets"] = [{"version": 1, "weight": 80}, {"version": 9, "weight": 20}]  # no v9
    assert ops.post("/api/v1/releases/", body).status_code == 404
    stale = release_body()
    stale["moves"][1]["if_match"] = '"rev-7"'
    response = ops.post("/api/v1/releases/", stale)
    assert response.status_code == 412 and response.json()["error"]["code"] == "precondition_failed"
    assert Label.objects.get(bundle__name="refunds", name="production").version.number == 1  # first move undone
    assert state(1) == "live" and state(2) == "unreleased"


def test_a_release_is_not_rolled_back_over_a_later_move(ops, production, v2, v3, billing):
    release = ops.post("/api/v1/releases/", release_body()).json()
    ops.put(LABEL, {"version": 3, "reason": "later, by hand"})
    refused = ops.post(f"/api/v1/releases/{release['id']}/rollback/", {"reason": "undo"})
    assert refused.status_code == 409 and refused.json()["error"]["details"]["labels"] == ["refunds:production"]
    assert Label.objects.get(bundle__name="refunds", name="production").version.number == 3


def test_releases_respect_roles_and_scopes(publisher, agent, production, v2, billing):
    assert agent.post("/api/v1/releases/", release_body()).status_code == 403
    assert publisher.post("/api/v1/releases/", release_body()).status_code == 403  # production is protected
    from access.actors import SYSTEM
    from access.models import Role
    from access.services import api_key_create
    from tests.conftest import Api

    key, secret = api_key_create(name="scoped-ops", role=Role.OPS, actor=SYSTEM, scopes=["refunds"])
    scoped = Api(secret, key.as_actor())
    assert scoped.post("/api/v1/releases/", release_body()).status_code == 404  # billing is not in its scope
