"""Regression tests for what the code review found."""

import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from access.models import Role
from audit.models import AuditEvent
from registry.models import Label
from sessions_app.models import Session
from tests.conftest import make_api
from tests.fixtures.realistic_bundles import BUNDLES


@pytest.fixture
def ops(db):
    return make_api(Role.OPS, name="review-ops")


def _breaking_bundle(api) -> str:
    case = BUNDLES["safety_policy_tightened"]
    api.post("/api/v1/bundles/", {"name": case["bundle"]})
    api.post(f"/api/v1/bundles/{case['bundle']}/versions/", {"content": case["before"], "message": "1"})
    api.post(f"/api/v1/bundles/{case['bundle']}/versions/", {"content": case["after"], "message": "2"})
    api.put(f"/api/v1/bundles/{case['bundle']}/labels/production/", {"version": 1, "reason": "go"})
    return case["bundle"]


def test_a_request_cannot_lower_the_policy_to_slip_a_breaking_move_through(ops):
    name = _breaking_bundle(ops)
    path = f"/api/v1/bundles/{name}/labels/production/"
    response = ops.put(path, {"version": 2, "reason": "sneak", "compatibility": "none"})
    assert response.status_code == 409
    label = Label.objects.get(bundle__name=name, name="production")
    assert (label.version.number, label.compatibility) == (1, "backward")


def test_changing_the_policy_through_put_is_audited_and_in_the_label_history(ops):
    name = _breaking_bundle(ops)
    path = f"/api/v1/bundles/{name}/labels/production/"
    assert ops.put(path, {"version": 1, "reason": "relax", "compatibility": "none"}).json()["compatibility"] == "none"
    # Issue 36: the change is in the label's history, as PATCH's is, naming who made it.
    history = ops.get(path + "history/").json()["results"]
    assert [(h["kind"], h["by"], h["reason"]) for h in history][:1] == [("policy", "key:review-ops", "relax")]
    assert len(history) == 2
    assert Label.objects.get(bundle__name=name, name="production").updated_by == "key:review-ops"
    event = AuditEvent.objects.filter(action="label.policy_changed").get()
    assert (event.reason, event.data) == (
        "relax",
        {"from": {"compatibility": "backward"}, "to": {"compatibility": "none"}},
    )
    assert ops.put(path, {"version": 2, "reason": "now unchecked"}).status_code == 200


def test_a_publisher_cannot_change_the_policy_through_put(ops):
    # Issue 36: the policy is ops' (PATCH); a publisher's PUT with `compatibility` was applied.
    name = _breaking_bundle(ops)
    ops._send("patch", f"/api/v1/bundles/{name}/labels/production/", {"protected": False, "reason": "open"})
    ops.put(f"/api/v1/bundles/{name}/labels/staging/", {"version": 1, "reason": "s", "compatibility": "backward"})
    publisher = make_api(Role.PUBLISHER, name="review-writer")
    for label in ("production", "staging"):
        path = f"/api/v1/bundles/{name}/labels/{label}/"
        response = publisher.put(path, {"version": 2, "reason": "sneak", "compatibility": "none"})
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"
        assert Label.objects.get(bundle__name=name, name=label).compatibility == "backward"
        # The same move without touching the policy is judged by it (breaking: 409), as before.
        assert publisher.put(path, {"version": 2, "reason": "try"}).status_code == 409
        # Saying the policy it already has is not a change.
        same = publisher.put(path, {"version": 1, "reason": "same", "compatibility": "backward"})
        assert same.status_code == 200, same.content
    assert not AuditEvent.objects.filter(action="label.policy_changed", actor="key:review-writer").exists()


def test_rollback_may_name_any_version_and_is_judged_unless_it_was_a_target_before(ops):
    name = _breaking_bundle(ops)
    path = f"/api/v1/bundles/{name}/labels/production/rollback/"
    refused = ops.post(path, {"to_version": 2, "reason": "forward"})
    assert (refused.status_code, refused.json()["error"]["details"]["level"]) == (409, "major")
    allowed = ops.post(path, {"to_version": 2, "reason": "forward", "allow_breaking": True})
    assert allowed.status_code == 200 and allowed.json()["version"] == 2


def test_a_scoped_key_reads_only_its_bundles_audit_events(ops):
    _breaking_bundle(ops)
    ops.post("/api/v1/bundles/", {"name": "support-bot"})
    scoped = make_api(Role.OPS, name="scoped")
    from access.models import ApiKey

    key = ApiKey.objects.get(name="scoped")
    key.scopes = ["support-*"]
    key.save(update_fields=["scopes"])
    targets = {e["target"] for e in scoped.get("/api/v1/audit/").json()["results"]}
    assert targets == {"support-bot"}
    assert len(ops.get("/api/v1/audit/?limit=200").json()["results"]) > 5


def test_deeply_nested_json_is_a_400_not_a_500(db):
    agent = make_api(Role.AGENT)
    body = '{"bundle": ' + "[" * 5000 + "]" * 5000 + "}"
    response = agent.post("/api/v1/sessions/", body)
    assert (response.status_code, response.json()["error"]["code"]) == (400, "malformed_json")
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    ("hops", "forwarded", "expected"),
    [
        (0, "1.2.3.4", "127.0.0.1"),
        (1, "9.9.9.9, 1.2.3.4", "1.2.3.4"),
        (2, "9.9.9.9, 1.2.3.4", "9.9.9.9"),
        (1, "not-an-ip", "127.0.0.1"),
        (2, "1.2.3.4", "127.0.0.1"),
    ],
)
def test_the_client_address_comes_from_trusted_proxy_hops_only(ops, hops, forwarded, expected):
    with override_settings(TRUSTED_PROXY_HOPS=hops):
        ops.post("/api/v1/bundles/", {"name": "addr"}, HTTP_X_FORWARDED_FOR=forwarded)
    assert AuditEvent.objects.get(action="bundle.created").client_ip == expected


def test_label_creation_with_if_none_match_star_refuses_an_existing_label(ops):
    # Issue 36 (carried over): no "must not exist": a second creator silently moved the first's label.
    name = _breaking_bundle(ops)
    path = f"/api/v1/bundles/{name}/labels/staging/"
    created = ops.put(path, {"version": 1, "reason": "mine"}, HTTP_IF_NONE_MATCH="*")
    assert created.status_code == 201, created.content
    second = ops.put(path, {"version": 2, "reason": "also mine", "allow_breaking": True}, HTTP_IF_NONE_MATCH="*")
    assert second.status_code == 412, second.content
    error = second.json()["error"]
    assert error["code"] == "precondition_failed" and error["details"]["current"]["version"] == 1
    assert Label.objects.get(bundle__name=name, name="staging").version.number == 1


@pytest.mark.parametrize(
    ("peer", "proxies", "expected"),
    [
        ("10.9.8.7", "127.0.0.0/8", "10.9.8.7"),  # not a configured proxy: its own address
        ("10.9.8.7", "10.9.8.0/24", "1.2.3.4"),
        ("::ffff:10.9.8.7", "10.9.8.7", "1.2.3.4"),
        ("2001:db8::1", "10.0.0.0/8,2001:db8::/64", "1.2.3.4"),
    ],
)
def test_x_forwarded_for_is_read_only_from_a_trusted_proxy(ops, settings, peer, proxies, expected):
    # Issue 36: X-Forwarded-For was trusted from any peer that reached the app directly.
    import ipaddress

    settings.TRUSTED_PROXY_HOPS = 1
    settings.TRUSTED_PROXIES = tuple(ipaddress.ip_network(p) for p in proxies.split(","))
    ops.post("/api/v1/bundles/", {"name": "addr"}, HTTP_X_FORWARDED_FOR="1.2.3.4", REMOTE_ADDR=peer)
    assert AuditEvent.objects.get(action="bundle.created").client_ip == expected


def test_a_direct_peer_cannot_claim_loopback_for_metrics_or_readyz(client, settings, db):
    settings.TRUSTED_PROXY_HOPS = 1
    settings.METRICS_TOKEN = ""
    forged = {"HTTP_X_FORWARDED_FOR": "127.0.0.1", "REMOTE_ADDR": "10.9.8.7"}
    assert client.get("/metrics", **forged).status_code == 401
    from django.test import RequestFactory

    from metrics.views import operator_request

    assert not operator_request(RequestFactory().get("/readyz", **forged))
    assert operator_request(RequestFactory().get("/readyz", HTTP_X_FORWARDED_FOR="127.0.0.1"))  # via a loopback proxy


def test_key_commands_find_a_key_by_name_after_a_rotation_with_grace_has_ended(db):
    from io import StringIO

    from django.core.management import call_command

    from access.models import ApiKey

    call_command("create_api_key", "--name", "bot", "--role", "agent", stdout=StringIO())
    call_command("rotate_api_key", "bot", "--grace-minutes", "5", stdout=StringIO())
    ApiKey.objects.filter(name="bot", rotated_from__isnull=True).update(expires_at=timezone.now() - timedelta(1))
    call_command("revoke_api_key", "bot", stdout=StringIO())  # one working key by that name: no ambiguity
    assert ApiKey.objects.filter(name="bot", revoked_at__isnull=False).count() == 1


def test_a_bad_host_header_gets_the_json_error_shape(client, db):
    response = client.get("/api/v1/bundles/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["code"] == "validation_error"


def test_a_lapsed_session_reads_expired_before_the_sweep(db, bundle, production):
    agent = make_api(Role.AGENT, name="lapsed")
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds", "ttl_seconds": 60}).json()
    Session.objects.filter(pk=session["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert agent.get(f"/api/v1/sessions/{session['id']}/").json()["status"] == "expired"


def test_the_version_list_pages_by_20_at_most(db, bundle, ops):
    from registry.services import version_publish
    from tests.conftest import content

    for i in range(25):
        version_publish(bundle=bundle, content=content(f"v{i}"), message="m", actor=ops.actor)
    page = ops.get("/api/v1/bundles/refunds/versions/?limit=200").json()
    assert len(page["results"]) == 20 and page["next"]
