"""The drain dashboard's tools tab: each tool signature in motion, who still needs it and the
expected time left from the sessions' leases."""

import re

from django.urls import reverse

from registry.services import version_publish
from sessions_app.services import session_start
from tests.adminui.test_adminui_views import reader  # noqa: F401 (fixture)
from tests.registry.test_tool_drain import hook, move, renamed_tool, shared  # noqa: F401 (fixtures)


def test_the_tools_tab_shows_who_still_needs_a_draining_signature_and_for_how_long(
    reader,  # noqa: F811
    bundle,
    shared,  # noqa: F811
    ops,
    agent,
    django_capture_on_commit_callbacks,
):
    v1, _, v3 = shared
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v1)
    session_start(bundle=bundle, actor=agent.actor, ttl_seconds=600)
    session_start(bundle=bundle, actor=agent.actor, ttl_seconds=600)
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v3)
    version_publish(bundle=bundle, content=renamed_tool("Never released."), message="v4", actor=ops.actor)
    page = reader.get(reverse("admin:adminui_drain_tools")).content.decode()
    old = re.search(r'<tr data-tool="process_refund" data-hash="\w+" data-state="draining">(.*?)</tr>', page, re.S)
    assert old is not None, page
    row = old.group(1)
    assert 'class="sessions">2<' in row
    assert f"{agent.actor.name.removeprefix('key:')}: 2" in row
    assert re.search(r'class="time-left" title="[\d: -]+">(9|10) min \d+ s<', row)
    carriers = re.sub(r"<[^>]+>", "", row)
    assert "refunds@1" in carriers and "refunds@2" not in carriers  # v2 was never released
    new = re.search(r'<tr data-tool="issue_refund" data-hash="\w+" data-state="live">(.*?)</tr>', page, re.S)
    assert new is not None and "a label targets it" in new.group(1)
    assert "Tools" in reader.get(reverse("admin:adminui_drain")).content.decode()
