"""The REST contract (docs/api.md), end to end through HTTP: paths, fields, status
codes and exact values, against a real PostgreSQL."""

import hashlib
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from django.utils import timezone

from access.models import Role
from registry.canonical import canonical_bytes, normalise_content
from registry.models import Bundle, BundleVersion, Label
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from tests.conftest import content, make_api, pinned_body

HistoricalLabel = Label.history.model

BUNDLE_FIELDS = {"name", "description", "when_to_use", "labels", "latest_version", "created_at"}
VERSION_FIELDS = {
    "number",
    "content_hash",
    "content",
    "message",
    "author",
    "created_at",
    "state",
    "active_sessions",
    "drained_at",
}
POLICY_FIELDS = {"protected", "compatibility", "required_checks", "required_approvals"}
LABEL_FIELDS = {"name", "version", "targets", "revision", "updated_at", "updated_by"} | POLICY_FIELDS
MOVE_FIELDS = {"from_version", "to_version", "targets", "release", "by", "reason", "at", "note", "kind"} | POLICY_FIELDS
SESSION_FIELDS = {
    "id",
    "bundle",
    "version",
    "content_hash",
    "label",
    "status",
    "started_at",
    "last_seen_at",
    "expires_at",
    "ended_at",
    "external_id",
    "variables",  # session-scoped variable values (issue 11)
}


def body(response) -> Any:
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def when(value: str) -> datetime:
    """An ISO 8601 time from the API; the contract wants UTC."""
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def recent(value: str) -> datetime:
    parsed = when(value)
    assert abs(timezone.now() - parsed) < timedelta(seconds=30), value
    return parsed


def canonical_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The content as the contract stores it: defaults filled in."""
    return json.loads(canonical_bytes(normalise_content(doc)))


def digest_of(doc: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(normalise_content(doc))).hexdigest()


def start(api, **fields: Any) -> dict[str, Any]:
    response = api.post("/api/v1/sessions/", {"bundle": "refunds", **fields})
    assert response.status_code == 201, response.content
    return body(response)


# --- bundles ------------------------------------------------------------------------------------


def test_it_creates_a_bundle_and_returns_it(publisher):
    response = publisher.post("/api/v1/bundles/", {"name": "billing.v2_x-1", "description": "Billing agent"})
    assert response.status_code == 201
    data = body(response)
    assert set(data) == BUNDLE_FIELDS
    assert data == {
        "name": "billing.v2_x-1",
        "description": "Billing agent",
        "when_to_use": "",
        "labels": {},
        "latest_version": None,
        "created_at": data["created_at"],
    }
    recent(data["created_at"])
    bundle = Bundle.objects.get(name="billing.v2_x-1")
    assert (bundle.description, bundle.created_by) == ("Billing agent", "key:test-publisher")


def test_it_defaults_the_description_to_empty(publisher):
    response = publisher.post("/api/v1/bundles/", {"name": "billing"})
    assert response.status_code == 201
    assert body(response)["description"] == ""


def test_it_lists_bundles_with_their_labels_and_latest_version(ops, bundle, v1, v2, production):
    label_move(bundle=bundle, name="staging", version=v2, actor=ops.actor, reason="stage")
    bundle_create(name="billing", description="", actor=ops.actor)
    response = ops.get("/api/v1/bundles/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == {"results", "next"}
    assert data["next"] is None
    assert [set(b) for b in data["results"]] == [BUNDLE_FIELDS, BUNDLE_FIELDS]
    assert [{k: v for k, v in b.items() if k != "created_at"} for b in data["results"]] == [
        {"name": "billing", "description": "", "when_to_use": "", "labels": {}, "latest_version": None},
        {
            "name": "refunds",
            "description": "Refund agent",
            "when_to_use": "",
            "labels": {"production": 1, "staging": 2},
            "latest_version": 2,
        },
    ]


def test_it_shows_one_bundle(agent, bundle, v1, v2, production):
    response = agent.get("/api/v1/bundles/refunds/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == BUNDLE_FIELDS
    assert data["name"] == "refunds"
    assert data["description"] == "Refund agent"
    assert data["labels"] == {"production": 1}
    assert data["latest_version"] == 2
    assert when(data["created_at"]) == bundle.created_at


def test_it_pages_the_bundle_list_by_cursor(agent, ops):
    for name in ["c", "a", "e", "b", "d"]:
        bundle_create(name=name, description="", actor=ops.actor)
    names, url = [], "/api/v1/bundles/?limit=2"
    pages = 0
    while url:
        data = body(agent.get(url))
        assert set(data) == {"results", "next"}
        names += [b["name"] for b in data["results"]]
        url = data["next"]
        pages += 1
    assert names == ["a", "b", "c", "d", "e"]
    assert pages == 3


# --- versions -----------------------------------------------------------------------------------


def test_it_publishes_a_version_with_201_and_every_field(publisher, bundle):
    doc = content()
    response = publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "first"})
    assert response.status_code == 201
    data = body(response)
    assert set(data) == VERSION_FIELDS | {"warnings", "model", "dependents", "dependents_total"}
    unknown = "The model 'm-1' is not in the model catalog: no retirement date or cache floor is known for it."
    assert data == {
        "warnings": [{"path": "content.model.name", "message": unknown}],  # m-1: not a provider's model
        "model": {"name": "m-1", "catalog": None},
        "dependents": [],
        "dependents_total": 0,
        "number": 1,
        "content_hash": digest_of(doc),
        "content": canonical_doc(doc),
        "message": "first",
        "author": "key:test-publisher",
        "created_at": data["created_at"],
        "state": "unreleased",
        "active_sessions": 0,
        "drained_at": None,
    }
    recent(data["created_at"])
    assert data["content"]["tools"] == doc["tools"]
    assert data["content"]["guardrails"] == {} and data["content"]["output_schema"] is None
    assert response["ETag"] == f'"{digest_of(doc)}"'
    stored = BundleVersion.objects.get(bundle=bundle, number=1)
    assert bytes(stored.canonical) == canonical_bytes(normalise_content(doc))


def test_it_answers_a_republish_of_identical_content_with_200_and_the_same_version(publisher, bundle):
    doc = content()
    first = publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "first"})
    assert first.status_code == 201
    # The same document written differently: other key order, defaults spelled out.
    same = dict(reversed(list(doc.items()))) | {"guardrails": {}, "metadata": {}, "output_schema": None}
    again = publisher.post("/api/v1/bundles/refunds/versions/", {"content": same, "message": "second try"})
    assert again.status_code == 200
    assert body(again) == body(first)  # same number, same message: nothing new was recorded
    assert body(again)["number"] == 1
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_numbers_versions_gaplessly_even_around_republishes(publisher, bundle):
    a, b, c = content("A"), content("B"), content("C")
    numbers, statuses = [], []
    for doc in [a, a, b, a, b, c]:
        response = publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "m"})
        numbers.append(body(response)["number"])
        statuses.append(response.status_code)
    assert numbers == [1, 1, 2, 1, 2, 3]
    assert statuses == [201, 200, 201, 200, 200, 201]
    assert list(BundleVersion.objects.filter(bundle=bundle).order_by("number").values_list("number", flat=True)) == [
        1,
        2,
        3,
    ]


def test_it_numbers_each_bundle_on_its_own(publisher, bundle, v1, v2):
    publisher.post("/api/v1/bundles/", {"name": "billing"})
    response = publisher.post("/api/v1/bundles/billing/versions/", {"content": content(), "message": "same as v1"})
    assert response.status_code == 201
    assert body(response)["number"] == 1


def test_it_serves_a_version_with_its_canonical_content_and_etag(agent, bundle, v1, v2):
    response = agent.get("/api/v1/bundles/refunds/versions/2/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == VERSION_FIELDS
    assert response["ETag"] == f'"{v2.content_hash}"'
    assert data["number"] == 2
    assert data["content_hash"] == v2.content_hash == digest_of(content("Version two."))
    assert data["content"] == canonical_doc(content("Version two."))
    assert canonical_bytes(data["content"]) == bytes(v2.canonical)
    assert data["message"] == "v2"
    assert data["author"] == "key:test-ops"
    assert data["state"] == "unreleased"


def test_it_answers_a_version_get_with_a_matching_etag_with_304(agent, v1):
    response = agent.get("/api/v1/bundles/refunds/versions/1/", HTTP_IF_NONE_MATCH=f'"{v1.content_hash}"')
    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == f'"{v1.content_hash}"'
    other = agent.get("/api/v1/bundles/refunds/versions/1/", HTTP_IF_NONE_MATCH='"something-else"')
    assert other.status_code == 200


def test_it_lists_versions_newest_first(agent, publisher, bundle, v1, v2):
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=publisher.actor)
    data = body(agent.get("/api/v1/bundles/refunds/versions/"))
    assert set(data) == {"results", "next"}
    assert [v["number"] for v in data["results"]] == [3, 2, 1]
    assert [v["message"] for v in data["results"]] == ["v3", "v2", "v1"]
    assert all(set(v) == VERSION_FIELDS for v in data["results"])
    assert data["next"] is None


def test_it_pages_versions_by_cursor(agent, publisher, bundle, v1, v2):
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=publisher.actor)
    first = agent.get("/api/v1/bundles/refunds/versions/?limit=2")
    assert first.status_code == 200
    page1 = body(first)
    assert set(page1) == {"results", "next"}
    assert [v["number"] for v in page1["results"]] == [3, 2]
    assert page1["next"].startswith("http://testserver/api/v1/bundles/refunds/versions/?")
    assert "cursor=" in page1["next"]
    page2 = body(agent.get(page1["next"]))
    assert set(page2) == {"results", "next"}
    assert [v["number"] for v in page2["results"]] == [1]
    assert page2["next"] is None


def test_it_counts_active_sessions_of_a_version(agent, ops, v1, production):
    start(agent)
    start(agent)
    ended = start(agent)
    ops.post(f"/api/v1/sessions/{ended['id']}/end/")
    data = body(agent.get("/api/v1/bundles/refunds/versions/1/"))
    assert data["active_sessions"] == 2
    assert data["state"] == "live"


# --- labels -------------------------------------------------------------------------------------


def test_it_lists_labels_with_their_fields(agent, publisher, bundle, v1, v2, production):
    publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "stage v2"})
    response = agent.get("/api/v1/bundles/refunds/labels/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == {"results", "next"}
    assert data["next"] is None
    assert all(set(label) == LABEL_FIELDS for label in data["results"])
    assert [
        {
            k: v
            for k, v in label.items()
            if k not in ("updated_at", "targets", "revision", "required_checks", "required_approvals")
        }
        for label in data["results"]
    ] == [
        {
            "name": "production",
            "version": 1,
            "protected": True,
            "compatibility": "backward",
            "updated_by": "key:test-ops",
        },
        {
            "name": "staging",
            "version": 2,
            "protected": False,
            "compatibility": "none",
            "updated_by": "key:test-publisher",
        },
    ]
    assert when(data["results"][0]["updated_at"]) == production.updated_at
    recent(data["results"][1]["updated_at"])


def test_it_creates_a_label_with_201_and_moves_it_with_200(publisher, bundle, v1, v2):
    created = publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "stage v1"})
    assert created.status_code == 201
    data = body(created)
    assert set(data) == LABEL_FIELDS | {"dependents", "dependents_total"}
    assert {
        k: v
        for k, v in data.items()
        if k not in ("updated_at", "targets", "revision", "required_checks", "required_approvals")
    } == {
        "dependents": [],
        "dependents_total": 0,
        "name": "staging",
        "version": 1,
        "protected": False,
        "compatibility": "none",
        "updated_by": "key:test-publisher",
    }
    moved = publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "stage v2"})
    assert moved.status_code == 200
    assert body(moved)["version"] == 2
    assert when(body(moved)["updated_at"]) > when(data["updated_at"])
    label = Label.objects.get(bundle=bundle, name="staging")
    assert (label.version_id, label.previous_version_id) == (v2.pk, v1.pk)
    assert HistoricalLabel.objects.filter(name="staging").count() == 2
    # The version it left has no label and no session: drained at once. The target is live.
    assert body(publisher.get("/api/v1/bundles/refunds/versions/1/"))["state"] == "drained"
    assert body(publisher.get("/api/v1/bundles/refunds/versions/2/"))["state"] == "live"


def test_it_makes_a_drained_version_live_again_when_a_label_moves_back(publisher, bundle, v1, v2):
    publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "stage v1"})
    publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "stage v2"})
    drained = body(publisher.get("/api/v1/bundles/refunds/versions/1/"))
    assert drained["state"] == "drained"
    recent(drained["drained_at"])
    back = publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "back to v1"})
    assert back.status_code == 200
    live = body(publisher.get("/api/v1/bundles/refunds/versions/1/"))
    assert (live["state"], live["drained_at"]) == ("live", None)


def test_it_answers_a_put_to_the_current_target_with_200_and_records_nothing(publisher, bundle, v1):
    publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "stage v1"})
    history = HistoricalLabel.objects.count()
    again = publisher.put("/api/v1/bundles/refunds/labels/staging/", {"version": 1, "reason": "again"})
    assert again.status_code == 200
    assert body(again)["version"] == 1
    assert HistoricalLabel.objects.count() == history


def test_it_protects_production_on_creation_and_nothing_else(ops, publisher, bundle, v1):
    created = ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 1, "reason": "first"})
    assert created.status_code == 201
    assert body(created)["protected"] is True
    assert body(created)["updated_by"] == "key:test-ops"
    for name in ["staging", "canary", "production-eu", "prod"]:
        response = publisher.put(f"/api/v1/bundles/refunds/labels/{name}/", {"version": 1, "reason": "r"})
        assert response.status_code == 201, name
        assert body(response)["protected"] is False, name
    assert list(Label.objects.filter(protected=True).values_list("name", flat=True)) == ["production"]


def test_it_lets_ops_move_production(ops, v2, production):
    response = ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    assert response.status_code == 200
    assert body(response)["version"] == 2
    assert body(response)["protected"] is True


def test_it_shows_one_label(agent, production):
    response = agent.get("/api/v1/bundles/refunds/labels/production/")
    assert response.status_code == 200
    assert {
        k: v
        for k, v in body(response).items()
        if k not in ("updated_at", "targets", "revision", "required_checks", "required_approvals")
    } == {
        "name": "production",
        "version": 1,
        "protected": True,
        "compatibility": "backward",
        "updated_by": "key:test-ops",
    }


def test_it_lists_label_history_newest_first(agent, ops, bundle, v1, v2, production):
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    ops.post("/api/v1/bundles/refunds/labels/production/rollback/", {"reason": "v2 is broken"})
    response = agent.get("/api/v1/bundles/refunds/labels/production/history/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == {"results", "next"}
    assert data["next"] is None
    moves = data["results"]
    assert all(set(move) == MOVE_FIELDS for move in moves)
    assert [
        {k: v for k, v in move.items() if k not in ("at", "note", "targets", "release", "kind", *POLICY_FIELDS)}
        for move in moves
    ] == [
        {"from_version": 2, "to_version": 1, "by": "key:test-ops", "reason": "v2 is broken"},
        {"from_version": 1, "to_version": 2, "by": "key:test-ops", "reason": "ship v2"},
        {"from_version": None, "to_version": 1, "by": "key:test-ops", "reason": "first release"},
    ]
    assert [move["note"].split(":")[0] for move in moves] == [
        "compatibility check not applied",
        "compatibility check passed",
        "",
    ]
    times = [when(move["at"]) for move in moves]
    assert times == sorted(times, reverse=True)


def test_it_pages_label_history_by_cursor(agent, ops, bundle, v1, v2, production):
    for target in [2, 1, 2]:
        ops.put("/api/v1/bundles/refunds/labels/production/", {"version": target, "reason": f"to {target}"})
    page1 = body(agent.get("/api/v1/bundles/refunds/labels/production/history/?limit=3"))
    assert [m["reason"] for m in page1["results"]] == ["to 2", "to 1", "to 2"]
    page2 = body(agent.get(page1["next"]))
    assert [m["reason"] for m in page2["results"]] == ["first release"]
    assert page2["next"] is None


def test_it_rolls_back_to_the_previous_target_by_default(ops, bundle, v1, v2, production):
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor)
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 3, "reason": "ship v3"})
    response = ops.post("/api/v1/bundles/refunds/labels/production/rollback/", {"reason": "v3 is broken"})
    assert response.status_code == 200
    data = body(response)
    assert set(data) == LABEL_FIELDS
    assert (data["name"], data["version"], data["protected"]) == ("production", 2, True)
    latest = body(ops.get("/api/v1/bundles/refunds/labels/production/history/"))["results"][0]
    assert (latest["from_version"], latest["to_version"], latest["reason"]) == (3, 2, "v3 is broken")


def test_it_rolls_back_to_a_version_the_label_targeted_before(ops, bundle, v1, v2, production):
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor)
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 3, "reason": "ship v3"})
    response = ops.post(
        "/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 1, "reason": "back to the start"}
    )
    assert response.status_code == 200
    assert body(response)["version"] == 1
    assert Label.objects.get(name="production").version_id == v1.pk


def test_a_rollback_to_a_version_the_label_never_targeted_is_judged_like_a_move(ops, bundle, v1, v2, production):
    ops.put("/api/v1/bundles/refunds/labels/staging/", {"version": 2, "reason": "stage v2"})
    # staging targeted v2, but production never did: the move is checked (v2 only rewords, a patch).
    response = ops.post("/api/v1/bundles/refunds/labels/production/rollback/", {"to_version": 2, "reason": "r"})
    assert response.status_code == 200
    assert Label.objects.get(name="production").version_id == v2.pk
    note = body(ops.get("/api/v1/bundles/refunds/labels/production/history/"))["results"][0]["note"]
    assert note == "compatibility check passed: patch against version 1"


# --- revoke -------------------------------------------------------------------------------------


def test_it_revokes_a_version_and_its_sessions_get_410_with_the_labels(agent, ops, bundle, v1, v2, production):
    pinned = start(agent)
    assert pinned["version"] == 1
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    ops.put("/api/v1/bundles/refunds/labels/canary/", {"version": 2, "reason": "canary v2"})
    assert body(agent.get("/api/v1/bundles/refunds/versions/1/"))["state"] == "draining"

    response = ops.post("/api/v1/bundles/refunds/versions/1/revoke/", {"reason": "leaks secrets"})
    assert response.status_code == 200
    data = body(response)
    assert set(data) == VERSION_FIELDS
    assert (data["number"], data["state"]) == (1, "revoked")
    assert body(agent.get("/api/v1/bundles/refunds/versions/1/"))["state"] == "revoked"
    revoked = BundleVersion.objects.get(pk=v1.pk)
    assert revoked.revoke_reason == "leaks secrets"
    assert revoked.content_hash == v1.content_hash

    fetch = agent.get(f"/api/v1/sessions/{pinned['id']}/bundle/")
    assert fetch.status_code == 410
    assert body(fetch) == {
        "error": {
            "code": "version_revoked",
            "message": body(fetch)["error"]["message"],
            "details": {"labels": {"production": 2, "canary": 2}},
        }
    }
    # With the labels in hand the agent starts over, on what production targets now.
    assert start(agent)["version"] == 2


def test_it_revokes_a_version_nothing_targets_and_answers_a_second_revoke_with_200(ops, v1, v2, production):
    first = ops.post("/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "bad"})
    second = ops.post("/api/v1/bundles/refunds/versions/2/revoke/", {"reason": "still bad"})
    assert (first.status_code, second.status_code) == (200, 200)
    assert body(second)["state"] == "revoked"
    assert BundleVersion.objects.get(pk=v2.pk).revoke_reason == "bad"


# --- sessions -----------------------------------------------------------------------------------


def test_it_starts_a_session_pinned_to_what_production_targets(agent, bundle, v1, v2, production):
    response = agent.post("/api/v1/sessions/", {"bundle": "refunds"})
    assert response.status_code == 201
    data = body(response)
    assert set(data) == SESSION_FIELDS
    assert uuid.UUID(data["id"]).version == 7  # time-ordered (core/ids.py)
    assert {
        k: data[k] for k in ["bundle", "version", "content_hash", "label", "status", "ended_at", "external_id"]
    } == {
        "bundle": "refunds",
        "version": 1,
        "content_hash": v1.content_hash,
        "label": "production",
        "status": "active",
        "ended_at": None,
        "external_id": None,
    }
    started = recent(data["started_at"])
    assert when(data["last_seen_at"]) == started
    assert when(data["expires_at"]) - started == timedelta(seconds=1800)


def test_it_pins_new_sessions_to_the_new_target_after_a_move(agent, ops, v2, production):
    before = start(agent)
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    after = start(agent)
    assert (before["version"], after["version"]) == (1, 2)
    assert after["content_hash"] == v2.content_hash
    assert body(agent.get(f"/api/v1/sessions/{before['id']}/"))["version"] == 1


def test_it_pins_a_session_to_an_explicit_version(agent, v1, v2, production):
    data = start(agent, version=2)
    assert (data["version"], data["content_hash"], data["label"]) == (2, v2.content_hash, None)
    assert Session.objects.get(pk=data["id"]).version_id == v2.pk


def test_it_pins_a_session_to_the_named_label(agent, ops, bundle, v1, v2, production):
    label_move(bundle=bundle, name="staging", version=v2, actor=ops.actor, reason="stage")
    data = start(agent, label="staging")
    assert (data["version"], data["label"]) == (2, "staging")


def test_it_takes_the_ttl_given(agent, production):
    data = start(agent, ttl_seconds=60)
    assert when(data["expires_at"]) - when(data["started_at"]) == timedelta(seconds=60)
    assert Session.objects.get(pk=data["id"]).ttl_seconds == 60


def test_it_returns_the_same_session_for_the_same_external_id_from_the_same_key(agent, ops, v2, production):
    first = agent.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-42"})
    assert first.status_code == 201
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    again = agent.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-42"})
    assert again.status_code == 200
    assert body(again)["id"] == body(first)["id"]
    assert body(again)["version"] == 1  # still the session pinned before the move
    assert body(again)["external_id"] == "conv-42"
    assert Session.objects.filter(external_id="conv-42").count() == 1


def test_it_starts_a_new_session_for_the_same_external_id_from_another_key(agent, production):
    other = make_api(Role.AGENT, "other-agent")
    mine = agent.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-42"})
    theirs = other.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-42"})
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert body(mine)["id"] != body(theirs)["id"]
    assert Session.objects.filter(external_id="conv-42").count() == 2


def test_it_keeps_external_ids_exactly_as_sent(agent, production):
    plain = agent.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": "conv-42"})
    spaced = agent.post("/api/v1/sessions/", {"bundle": "refunds", "external_id": " conv-42 "})
    assert (plain.status_code, spaced.status_code) == (201, 201)
    assert body(spaced)["external_id"] == " conv-42 "


def test_it_shows_a_session_with_exactly_the_contract_fields(agent, production, v1):
    started = start(agent, external_id="conv-7", ttl_seconds=120)
    response = agent.get(f"/api/v1/sessions/{started['id']}/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == SESSION_FIELDS
    assert data == started
    assert data["id"] == started["id"]
    assert (data["bundle"], data["version"], data["content_hash"], data["label"]) == (
        "refunds",
        1,
        v1.content_hash,
        "production",
    )
    assert (data["status"], data["ended_at"], data["external_id"]) == ("active", None, "conv-7")


def test_it_serves_the_pinned_bundle_as_exact_canonical_bytes(agent, ops, bundle, v1, v2, production):
    session = start(agent)
    url = f"/api/v1/sessions/{session['id']}/bundle/"
    expected = canonical_bytes(
        {"bundle": "refunds", "version": 1, "content_hash": v1.content_hash, "content": canonical_doc(content())}
    )
    assert expected == pinned_body(v1)
    first = agent.get(url)
    assert first.status_code == 200
    assert first["Content-Type"] == "application/json"
    assert first["ETag"] == f'"{v1.content_hash}"'
    assert first.content == expected
    assert agent.get(url).content == expected

    # Labels move, other versions appear: the pinned bytes do not change.
    ops.put("/api/v1/bundles/refunds/labels/production/", {"version": 2, "reason": "ship v2"})
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor)
    after = agent.get(url)
    assert after.status_code == 200
    assert after.content == expected
    assert after["ETag"] == f'"{v1.content_hash}"'

    # Every session pinned to that version gets the same bytes; the new production session others.
    explicit = start(agent, version=1)
    assert agent.get(f"/api/v1/sessions/{explicit['id']}/bundle/").content == expected
    newer = start(agent)
    assert agent.get(f"/api/v1/sessions/{newer['id']}/bundle/").content == pinned_body(v2)


def test_it_keeps_non_ascii_content_unescaped_in_the_pinned_bundle(agent, ops, bundle, production):
    doc = content("Réponds en français ✓ 日本語")
    version = version_publish(bundle=bundle, content=doc, message="fr", actor=ops.actor).version
    session = start(agent, version=version.number)
    raw = agent.get(f"/api/v1/sessions/{session['id']}/bundle/").content
    assert "Réponds en français ✓ 日本語".encode() in raw
    assert raw == pinned_body(version)
    assert json.loads(raw)["content_hash"] == hashlib.sha256(bytes(version.canonical)).hexdigest()


@pytest.mark.parametrize("header", ['"{h}"', 'W/"{h}"', '"other", "{h}"', "*"])
def test_it_answers_a_matching_if_none_match_with_304_and_no_body(agent, v1, production, header):
    session = start(agent)
    response = agent.get(
        f"/api/v1/sessions/{session['id']}/bundle/", HTTP_IF_NONE_MATCH=header.format(h=v1.content_hash)
    )
    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == f'"{v1.content_hash}"'


def test_it_answers_a_stale_if_none_match_with_the_body(agent, v1, v2, production):
    session = start(agent)
    response = agent.get(f"/api/v1/sessions/{session['id']}/bundle/", HTTP_IF_NONE_MATCH=f'"{v2.content_hash}"')
    assert response.status_code == 200
    assert response.content == pinned_body(v1)


def test_it_renews_the_lease_on_heartbeat(agent, production):
    session = start(agent)
    # Pretend the session was last seen 10 minutes ago.
    earlier = timezone.now() - timedelta(minutes=10)
    Session.objects.filter(pk=session["id"]).update(last_seen_at=earlier, expires_at=earlier + timedelta(seconds=1800))
    response = agent.post(f"/api/v1/sessions/{session['id']}/heartbeat/")
    assert response.status_code == 200
    data = body(response)
    assert set(data) == SESSION_FIELDS
    assert data["status"] == "active"
    seen = recent(data["last_seen_at"])
    assert when(data["expires_at"]) == seen + timedelta(seconds=1800)
    assert when(data["expires_at"]) > earlier + timedelta(seconds=1800) + timedelta(minutes=9)
    stored = Session.objects.get(pk=session["id"])
    assert (stored.last_seen_at, stored.expires_at) == (seen, when(data["expires_at"]))


def test_it_renews_the_lease_on_fetch_once_a_quarter_ttl_has_passed(agent, production):
    session = start(agent, ttl_seconds=400)
    url = f"/api/v1/sessions/{session['id']}/bundle/"
    # Seen 50 s ago (under a quarter of 400 s): a fetch does not need to write.
    recently = timezone.now() - timedelta(seconds=50)
    Session.objects.filter(pk=session["id"]).update(last_seen_at=recently, expires_at=recently + timedelta(seconds=400))
    assert agent.get(url).status_code == 200
    assert Session.objects.get(pk=session["id"]).last_seen_at == recently
    # Seen 150 s ago (over a quarter): the fetch renews the lease like a heartbeat.
    longer = timezone.now() - timedelta(seconds=150)
    Session.objects.filter(pk=session["id"]).update(last_seen_at=longer, expires_at=longer + timedelta(seconds=400))
    assert agent.get(url).status_code == 200
    stored = Session.objects.get(pk=session["id"])
    assert timezone.now() - stored.last_seen_at < timedelta(seconds=30)
    assert stored.expires_at == stored.last_seen_at + timedelta(seconds=400)


def test_it_ends_a_session_and_ending_twice_is_200_both_times(agent, production):
    session = start(agent)
    first = agent.post(f"/api/v1/sessions/{session['id']}/end/")
    assert first.status_code == 200
    data = body(first)
    assert set(data) == SESSION_FIELDS
    assert data["status"] == "ended"
    ended_at = recent(data["ended_at"])
    second = agent.post(f"/api/v1/sessions/{session['id']}/end/")
    assert second.status_code == 200
    assert body(second)["status"] == "ended"
    assert when(body(second)["ended_at"]) == ended_at
    assert body(agent.get(f"/api/v1/sessions/{session['id']}/"))["status"] == "ended"


def test_it_answers_fetch_and_heartbeat_after_end_with_410_session_ended(agent, v1, production):
    session = start(agent)
    agent.post(f"/api/v1/sessions/{session['id']}/end/")
    for response in [
        agent.get(f"/api/v1/sessions/{session['id']}/bundle/"),
        agent.get(f"/api/v1/sessions/{session['id']}/bundle/", HTTP_IF_NONE_MATCH=f'"{v1.content_hash}"'),
        agent.post(f"/api/v1/sessions/{session['id']}/heartbeat/"),
    ]:
        assert response.status_code == 410
        error = body(response)["error"]
        assert set(error) == {"code", "message", "details"}
        assert error["code"] == "session_ended"


def test_it_expires_a_lapsed_session_on_fetch_with_410(agent, production):
    session = start(agent, ttl_seconds=60)
    Session.objects.filter(pk=session["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = agent.get(f"/api/v1/sessions/{session['id']}/bundle/")
    assert response.status_code == 410
    assert body(response)["error"]["code"] == "session_ended"
    data = body(agent.get(f"/api/v1/sessions/{session['id']}/"))
    assert data["status"] == "expired"
    assert data["ended_at"] is not None


def test_it_hides_a_session_from_another_agent_key_but_not_from_ops(agent, ops, production):
    session = start(agent)
    other = make_api(Role.AGENT, "other-agent")
    for response in [
        other.get(f"/api/v1/sessions/{session['id']}/"),
        other.get(f"/api/v1/sessions/{session['id']}/bundle/"),
        other.post(f"/api/v1/sessions/{session['id']}/heartbeat/"),
        other.post(f"/api/v1/sessions/{session['id']}/end/"),
    ]:
        assert response.status_code == 404
        assert body(response)["error"]["code"] == "not_found"
    seen_by_ops = ops.get(f"/api/v1/sessions/{session['id']}/")
    assert seen_by_ops.status_code == 200
    assert body(seen_by_ops)["id"] == session["id"]
    assert body(seen_by_ops)["status"] == "active"
    ended_by_ops = ops.post(f"/api/v1/sessions/{session['id']}/end/")
    assert ended_by_ops.status_code == 200
    assert body(ended_by_ops)["status"] == "ended"
    assert body(agent.get(f"/api/v1/sessions/{session['id']}/"))["status"] == "ended"


# --- service endpoints --------------------------------------------------------------------------


def test_it_answers_healthz(anonymous):
    response = anonymous.get("/healthz")
    assert response.status_code == 200
    assert body(response) == {"status": "ok"}


def test_it_answers_readyz_when_database_and_broker_answer(anonymous):
    response = anonymous.get("/readyz")
    assert response.status_code == 200
    data = body(response)
    assert data["status"] == "ok"
    assert data["checks"] == {"database": "ok", "broker": "ok"}


CONTRACT_PATHS = {
    "/api/v1/bundles/": {"get", "post"},
    "/api/v1/bundles/{name}/": {"get"},
    "/api/v1/bundles/{name}/versions/": {"get", "post"},
    "/api/v1/bundles/{name}/versions/{number}/": {"get"},
    "/api/v1/bundles/{name}/versions/{number}/revoke/": {"post"},
    "/api/v1/bundles/{name}/dependents/": {"get"},
    "/api/v1/bundles/{name}/pin-policy/": {"get", "put"},
    "/api/v1/bundles/{name}/labels/": {"get"},
    "/api/v1/bundles/{name}/labels/{label}/": {"put"},
    "/api/v1/bundles/{name}/labels/{label}/history/": {"get"},
    "/api/v1/bundles/{name}/labels/{label}/rollback/": {"post"},
    "/api/v1/sessions/": {"post"},
    "/api/v1/sessions/{session_id}/": {"get"},
    "/api/v1/sessions/{session_id}/bundle/": {"get"},
    "/api/v1/sessions/{session_id}/heartbeat/": {"post"},
    "/api/v1/sessions/{session_id}/end/": {"post"},
    # Beyond the contract page (issue 4): the capability catalog and the audit log.
    "/api/v1/catalog/": {"get"},
    # The model catalog (issue 41).
    "/api/v1/models/": {"get"},
    "/api/v1/models/retiring/": {"get"},
    "/api/v1/models/{provider}/{name}/": {"get", "put"},
    "/api/v1/bundles/{name}/versions/{number}/derive/": {"post"},
    # Evaluation suites and runs (issue 40).
    "/api/v1/suites/": {"get", "post"},
    "/api/v1/suites/{name}/": {"get"},
    "/api/v1/suites/{name}/versions/": {"get", "post"},
    "/api/v1/suites/{name}/versions/{number}/": {"get"},
    "/api/v1/bundles/{name}/versions/{number}/evals/": {"get", "post"},
    "/api/v1/bundles/{name}/versions/{number}/evals/plan/": {"post"},
    "/api/v1/evals/{run_id}/": {"get"},
    "/api/v1/evals/compare/": {"get"},
    "/api/v1/tools/": {"get"},
    "/api/v1/tools/{name}/": {"get"},
    "/api/v1/mcp-servers/check/": {"post"},
    "/api/v1/shell/SKILL.md": {"get"},
    "/api/v1/bundles/{name}/versions/{number}/diff/": {"get"},  # issue 5
    # Issue 20: content-addressed export and import.
    "/api/v1/bundles/{name}/export/": {"get"},
    "/api/v1/bundles/{name}/import/": {"post"},
    "/api/v1/bundles/{name}/import-versions/": {"post"},
    "/api/v1/bundles/{name}/versions/{number}/canonical/": {"get"},
    "/api/v1/audit/": {"get"},
    # Issue 14: usage per version, webhooks.
    "/api/v1/bundles/{name}/versions/{number}/usage/": {"get"},
    "/api/v1/bundles/{name}/versions/{number}/checks/": {"get", "post"},
    "/api/v1/bundles/{name}/versions/{number}/approvals/": {"get", "post", "delete"},  # issue 27
    "/api/v1/releases/": {"post"},
    "/api/v1/changes/": {"get"},  # issue 27: change requests
    "/api/v1/changes/{change_id}/": {"get"},
    "/api/v1/changes/{change_id}/approve/": {"post"},
    "/api/v1/changes/{change_id}/reject/": {"post"},
    "/api/v1/releases/{release_id}/": {"get"},
    "/api/v1/releases/{release_id}/rollback/": {"post"},
    "/api/v1/webhooks/": {"get", "post"},
    "/api/v1/webhooks/{webhook_id}/": {"get", "patch", "delete"},
    "/api/v1/webhooks/{webhook_id}/rotate-secret/": {"post"},  # issue 18
    "/api/v1/webhooks/{webhook_id}/deliveries/": {"get"},
    "/api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver/": {"post"},
    # Issue 12: skills routing, session skills, metrics, compaction.
    "/api/v1/bundles/{name}/versions/{number}/metrics/": {"get"},
    "/api/v1/sessions/{session_id}/route/": {"post"},
    "/api/v1/sessions/{session_id}/turns/": {"post"},
    "/api/v1/sessions/{session_id}/skills/": {"get", "post"},
    "/api/v1/sessions/{session_id}/skills/{name}/": {"delete"},
    "/api/v1/sessions/{session_id}/compact/": {"post"},
    # Issue 11: knowledge packs, the per-turn render and the model's file tools.
    "/api/v1/knowledge/": {"get", "post"},
    "/api/v1/knowledge/{pack}/": {"get"},
    "/api/v1/knowledge/{pack}/files/": {"get"},
    "/api/v1/knowledge/{pack}/files/{path}": {"get", "put", "delete"},
    "/api/v1/sessions/{session_id}/render/": {"post"},
    "/api/v1/sessions/{session_id}/knowledge/{tool}": {"get"},
    "/api/v1/sessions/{session_id}/turn/": {"post"},  # issue 21: one call per turn
    # Issue 39: evidence from production and guarded rollouts.
    "/api/v1/sessions/{session_id}/scores/": {"post"},
    "/api/v1/bundles/{name}/versions/{number}/evidence/": {"get"},
    "/api/v1/bundles/{name}/evidence/compare/": {"get"},
    "/api/v1/bundles/{name}/labels/{label}/guard/": {"get", "put", "delete"},
    "/api/v1/bundles/{name}/labels/{label}/guard/override/": {"post"},
}


def test_it_serves_an_openapi_3_document_listing_every_contract_path(anonymous):
    response = anonymous.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "Prompt registry API"
    for path, methods in CONTRACT_PATHS.items():
        assert path in schema["paths"], path
        assert methods <= set(schema["paths"][path]), path
    assert {p for p in schema["paths"] if p.startswith("/api/v1/")} == set(CONTRACT_PATHS)
    as_json = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert as_json.status_code == 200
    assert json.loads(as_json.content)["paths"].keys() == schema["paths"].keys()


def test_it_serves_the_browsable_docs_page(anonymous):
    response = anonymous.get("/api/docs/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"<html" in response.content
    assert b"/api/schema/" in response.content
