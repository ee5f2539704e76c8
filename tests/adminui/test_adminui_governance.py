"""The admin's label policy page (label_policy_set, as PATCH .../labels/{label}/) and approving
a version from its page (approval_record, as POST .../versions/{n}/approvals/): through the
Django test client on real PostgreSQL."""

import pytest

from audit.models import AuditEvent
from registry.models import Label, VersionApproval
from tests.adminui.test_adminui_views import client_for, field_errors, make_user, u, words

pytestmark = pytest.mark.django_db

POLICY = {
    "protected": "on",
    "compatibility": "backward",
    "required_checks": "evals, lint",
    "required_approvals": "2",
    "reason": "four eyes on production",
}


@pytest.fixture
def olga(db):
    from adminui.groups import OPS

    return client_for(make_user("olga", OPS))


@pytest.fixture
def pat(db):
    from adminui.groups import PROMPT_ENGINEERS

    return client_for(make_user("pat", PROMPT_ENGINEERS))


def test_ops_edit_a_label_policy_from_the_bundle_page(olga, bundle, production):
    overview = olga.get(u("adminui_bundle", "refunds")).content.decode()
    assert u("adminui_label_policy", "refunds", "production") in overview
    form = olga.get(u("adminui_label_policy", "refunds", "production"))
    assert form.status_code == 200
    saved = olga.post(u("adminui_label_policy", "refunds", "production"), {**POLICY, "expected_revision": "1"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    label = Label.objects.get(pk=production.pk)
    assert (label.required_approvals, label.required_checks, label.compatibility) == (2, ["evals", "lint"], "backward")
    assert label.revision == 2
    assert AuditEvent.objects.filter(action="label.policy_changed", actor="user:olga").exists()
    assert "approvals required: 2" in words(olga.get(u("adminui_bundle", "refunds")))


def test_a_stale_policy_form_changes_nothing(olga, bundle, production):
    answer = olga.post(u("adminui_label_policy", "refunds", "production"), {**POLICY, "expected_revision": "7"})
    assert answer.status_code == 412
    assert Label.objects.get(pk=production.pk).required_approvals == 0


def test_a_bad_policy_is_shown_next_to_its_field(olga, bundle, production):
    bad = {**POLICY, "required_checks": "Evals", "expected_revision": "1"}
    answer = olga.post(u("adminui_label_policy", "refunds", "production"), bad)
    assert answer.status_code == 400
    assert field_errors(answer, "required_checks")
    too_many = olga.post(
        u("adminui_label_policy", "refunds", "production"),
        {**POLICY, "required_approvals": "11", "expected_revision": "1"},
    )
    assert too_many.status_code == 400
    assert field_errors(too_many, "required_approvals")


def test_a_publisher_is_not_offered_the_policy_and_a_forged_post_is_refused(pat, bundle, production):
    assert pat.get(u("adminui_label_policy", "refunds", "production")).status_code == 403
    forged = pat.post(u("adminui_label_policy", "refunds", "production"), {**POLICY, "expected_revision": "1"})
    assert forged.status_code == 403
    assert Label.objects.get(pk=production.pk).required_approvals == 0


def test_someone_else_approves_a_version_from_its_page(pat, bundle, v1):
    page = pat.get(u("adminui_version", "refunds", 1)).content.decode()
    assert 'id="approve-form"' in page
    done = pat.post(u("adminui_approve", "refunds", 1), {"reason": "read it"})
    assert done.status_code == 302
    approval = VersionApproval.objects.get()
    assert (approval.approver, approval.content_hash, approval.reason) == ("user:pat", v1.content_hash, "read it")
    page = words(pat.get(u("adminui_version", "refunds", 1)))
    assert "user:pat" in page and "Approve this version" not in page


def test_the_author_is_not_offered_to_approve_and_a_forged_post_is_refused(bundle):
    from adminui.groups import PROMPT_ENGINEERS
    from registry.services import version_publish
    from tests.conftest import content

    author = make_user("ann", PROMPT_ENGINEERS)
    from access.actors import actor_for_user

    version_publish(bundle=bundle, content=content("Ann's."), message="mine", actor=actor_for_user(author))
    client = client_for(author)
    page = words(client.get(u("adminui_version", "refunds", 1)))
    assert "Approve this version" not in page
    assert "its approval must come from someone else" in page
    client.post(u("adminui_approve", "refunds", 1), {"reason": "me"})
    assert not VersionApproval.objects.exists()
