"""registry.lifecycle and the rules that now live in one place: scope and role checks in the
services themselves, one limits module, one tool-rename rule, and previews that say what the
write would say."""

import pytest

from access.actors import Actor
from access.models import Role
from adminui.diffing import tool_changes
from adminui.forms import BundleCreateForm
from core.errors import Forbidden, InvalidContent, NotFound
from core.limits import BUNDLE_NAME_MAX
from registry import lifecycle
from registry.contracts import diff_contents
from registry.models import BundleVersion, Label, VersionState
from registry.services import bundle_update, label_move, label_rollback, version_publish, version_revoke
from sessions_app.models import Session
from sessions_app.services import session_end, session_start
from tests.conftest import content

# Keys scoped to support-* bundles; the fixture bundle is "refunds", outside that scope.
SCOPED_OPS = Actor(name="key:scoped-ops", role=Role.OPS, api_key_id=None, scopes=("support-*",))
SCOPED_PUBLISHER = Actor(name="key:scoped-pub", role=Role.PUBLISHER, api_key_id=None, scopes=("support-*",))


# --- scope checks live in the services ---------------------------------------------------------


def test_publish_refuses_an_actor_whose_scope_excludes_the_bundle(bundle, v1):
    with pytest.raises(NotFound):
        version_publish(bundle=bundle, content=content("sneaky"), message="m", actor=SCOPED_PUBLISHER)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_label_move_refuses_an_actor_whose_scope_excludes_the_bundle(bundle, v1, v2, production):
    with pytest.raises(NotFound):
        label_move(bundle=bundle, name="staging", version=v2, actor=SCOPED_OPS, reason="r")
    with pytest.raises(NotFound):
        label_move(bundle=bundle, name="production", version=v2, actor=SCOPED_OPS, reason="r")
    assert Label.objects.get(pk=production.pk).version_id == v1.pk
    assert not Label.objects.filter(name="staging").exists()


def test_rollback_refuses_an_actor_whose_scope_excludes_the_bundle(bundle, v1, v2, production, ops):
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2")
    with pytest.raises(NotFound):
        label_rollback(bundle=bundle, name="production", to_version=None, actor=SCOPED_OPS, reason="r")
    assert Label.objects.get(pk=production.pk).version_id == v2.pk


def test_revoke_refuses_an_actor_whose_scope_excludes_the_bundle(bundle, v1, v2, production):
    with pytest.raises(NotFound):
        version_revoke(version=v2, actor=SCOPED_OPS, reason="r")
    assert BundleVersion.objects.get(pk=v2.pk).state != VersionState.REVOKED


def test_session_start_refuses_an_actor_whose_scope_excludes_the_bundle(bundle, v1, production):
    agent = Actor(name="key:scoped-agent", role=Role.AGENT, api_key_id=None, scopes=("support-*",))
    with pytest.raises(NotFound):
        session_start(bundle=bundle, actor=agent)
    assert not Session.objects.exists()


def test_ops_may_not_end_a_session_outside_its_scope(bundle, v1, production, agent):
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    with pytest.raises(NotFound):
        session_end(session=session, actor=SCOPED_OPS)
    assert Session.objects.get(pk=session.pk).status == "active"


def test_bundle_update_refuses_an_actor_whose_scope_excludes_the_bundle(bundle):
    with pytest.raises(NotFound):
        bundle_update(bundle=bundle, actor=SCOPED_PUBLISHER, description="x", when_to_use="y")


def test_in_scope_actors_are_not_refused(bundle, v1, v2):
    scoped = Actor(name="key:refunds-ops", role=Role.OPS, api_key_id=None, scopes=("ref*",))
    label, created = label_move(bundle=bundle, name="staging", version=v2, actor=scoped, reason="r")
    assert created and label.version_id == v2.pk


def test_roles_are_checked_by_the_services_too(bundle, v1, v2, production):
    agent = Actor(name="key:agent", role=Role.AGENT)
    with pytest.raises(Forbidden):
        version_publish(bundle=bundle, content=content("x"), message="m", actor=agent)
    with pytest.raises(Forbidden):
        version_revoke(version=v2, actor=Actor(name="key:pub", role=Role.PUBLISHER), reason="r")


# --- one limits module ---------------------------------------------------------------------------


@pytest.mark.parametrize("length", [BUNDLE_NAME_MAX, BUNDLE_NAME_MAX + 1])
def test_the_api_and_the_admin_form_agree_on_the_bundle_name_limit(db, publisher, length):
    name = "a" * length
    response = publisher.post("/api/v1/bundles/", {"name": name})
    form = BundleCreateForm(data={"name": name, "description": "", "when_to_use": ""})
    if length <= BUNDLE_NAME_MAX:
        assert response.status_code == 201
        assert form.is_valid()
    else:
        assert response.status_code == 400
        assert "name" in response.json()["error"]["details"]
        assert not form.is_valid() and "name" in form.errors


# --- one rename rule ----------------------------------------------------------------------------


def test_the_diff_page_and_the_classification_pair_renames_by_the_same_rule():
    # Same input schema, new name and a reworded description: a rename by registry.contracts'
    # rule (same parameters). The admin's old rule (identical description and schema) said no.
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    old = {"system_prompt": "p", "tools": [{"name": "refund", "description": "Refund.", "input_schema": schema}]}
    new = {"system_prompt": "p", "tools": [{"name": "issue_refund", "description": "Refunds.", "input_schema": schema}]}
    kinds = {c.kind for c in diff_contents(old, new).changes}
    assert "tool_renamed" in kinds
    notes = {c.name: c.note for c in tool_changes(old["tools"], new["tools"])}
    assert notes == {"refund": "probably renamed to issue_refund", "issue_refund": "probably renamed from refund"}


def test_two_parameterless_tools_are_not_a_rename_on_either_page():
    empty = {"type": "object", "properties": {}}
    old = [{"name": "ping", "description": "", "input_schema": empty}]
    new = [{"name": "pong", "description": "", "input_schema": empty}]
    assert "tool_renamed" not in {c.kind for c in diff_contents({"tools": old}, {"tools": new}).changes}
    assert all(c.note == "" for c in tool_changes(old, new))


# --- previews say what the write would say -------------------------------------------------------


def test_the_publish_check_reports_what_publishing_refuses(bundle, v1, ops):
    broken = content("Call `missing_tool` first.")
    check = lifecycle.version_publish_check(bundle=bundle, content=broken)
    with pytest.raises(InvalidContent) as refused:
        version_publish(bundle=bundle, content=broken, message="m", actor=ops.actor)
    assert check.errors and check.errors == refused.value.details
    with pytest.raises(InvalidContent):
        lifecycle.version_publish_check(bundle=bundle, content={"tools": "not a list"})


def test_the_move_preview_refuses_what_the_move_refuses(bundle, v1, v2, production, publisher):
    preview = lifecycle.label_move_preview(bundle=bundle, label_name="production", target=v2, actor=publisher.actor)
    assert not preview.allowed
    with pytest.raises(Forbidden) as refused:
        label_move(bundle=bundle, name="production", version=v2, actor=publisher.actor, reason="r")
    assert preview.refusal == refused.value.message
    # A new label named production would be protected too.
    Label.objects.filter(pk=production.pk).delete()
    assert lifecycle.label_is_protected(bundle=bundle, name="production")
    assert not lifecycle.label_move_preview(
        bundle=bundle, label_name="production", target=v2, actor=publisher.actor
    ).allowed


def test_the_move_preview_states_the_consequence(bundle, v1, v2, production, ops, agent):
    session_start(bundle=bundle, actor=agent.actor)
    preview = lifecycle.label_move_preview(bundle=bundle, label_name="production", target=v2, actor=ops.actor)
    consequence = preview.consequence
    assert preview.allowed and not consequence.creates_label and consequence.current.pk == v1.pk
    assert consequence.old_starts_draining and not consequence.old_drains_at_once
    assert consequence.old_active_sessions == 1
    assert preview.check.required and not preview.check.rollback and preview.check.diff is not None


def test_the_revoke_preview_counts_labels_and_sessions(bundle, v1, v2, production, agent):
    session_start(bundle=bundle, actor=agent.actor)
    assert lifecycle.version_revoke_preview(version=v1) == lifecycle.RevokePreview(
        labels=["production"], active_sessions=1
    )
    assert lifecycle.version_revoke_preview(version=v2) == lifecycle.RevokePreview(labels=[], active_sessions=0)


def test_new_labels_get_their_policy_from_one_rule():
    assert lifecycle.new_label_policy("production") == lifecycle.LabelPolicy(protected=True, compatibility="backward")
    assert lifecycle.new_label_policy("staging") == lifecycle.LabelPolicy(protected=False, compatibility="none")
    assert lifecycle.new_label_policy("staging", compatibility="backward").compatibility == "backward"
