"""The admin UI's pages through the Django test client, on real PostgreSQL: what each group
is offered, what the server refuses anyway, validation errors next to their fields, and the
confirmation step before any label moves."""

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from access.actors import actor_for_user
from access.models import Role
from adminui.diffing import side_by_side, tool_changes
from adminui.groups import GROUP_PERMISSIONS, OPS, PROMPT_ENGINEERS
from audit.models import AuditEvent
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.services import label_move, version_publish
from sessions_app.models import Session, SessionStatus
from sessions_app.services import session_start
from tests.conftest import content


def make_user(username: str, group: str | None = None, **flags) -> User:
    user = User.objects.create_user(username=username, password="pw", is_staff=True, **flags)
    if group:
        if not Group.objects.filter(name=group).exists():
            from django.apps import apps

            from adminui.groups import groups_sync

            groups_sync(apps=apps)  # earlier transactional tests flush the groups the migration made
        user.groups.add(Group.objects.get(name=group))
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def engineer(db) -> Client:
    return client_for(make_user("pat", PROMPT_ENGINEERS))


@pytest.fixture
def ops_user(db) -> Client:
    return client_for(make_user("olga", OPS))


@pytest.fixture
def reader(db) -> Client:
    """Staff in no group, with the view permissions only: an agent, who reads."""
    user = make_user("rita")
    codenames = ["view_bundle", "view_bundleversion", "view_label", "view_session"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return client_for(user)


def text(response) -> str:
    return unescape(response.content.decode())


def words(response) -> str:
    """The page as a person reads it: tags dropped, whitespace collapsed."""
    flat = " ".join(unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())
    return re.sub(r" ([.,:;])", r"\1", flat)


def main_part(response) -> str:
    return response.content.decode().split('id="content-main"')[1].split("<footer")[0]


def field_errors(response, field: str) -> list[str]:
    """The messages shown in the error list next to `field` (see _form_fields.html)."""
    match = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', response.content.decode(), re.S)
    return [unescape(m) for m in re.findall(r"<li>(.*?)</li>", match.group(1), re.S)] if match else []


def u(name: str, *args, query: str = "") -> str:
    return reverse(f"admin:{name}", args=args) + (f"?{query}" if query else "")


def renamed_tool_content() -> dict:
    doc = content("You are a refund agent. Call `issue_refund` after checking the order.")
    doc["tools"][0]["name"] = "issue_refund"
    return doc


@pytest.fixture
def v2_renamed(bundle, ops, v1) -> BundleVersion:
    return version_publish(
        bundle=bundle, content=renamed_tool_content(), message="rename tool", actor=ops.actor
    ).version


def compatible_content() -> dict:
    """v1 with an optional parameter added and the prompt reworded: `minor` against v1."""
    doc = content("You are a refund agent. Call `process_refund` after checking the order; give a reason.")
    doc["tools"][0]["input_schema"]["properties"]["reason"] = {"type": "string"}
    return doc


@pytest.fixture
def v2_compatible(bundle, ops, v1) -> BundleVersion:
    return version_publish(
        bundle=bundle, content=compatible_content(), message="optional reason", actor=ops.actor
    ).version


@pytest.fixture
def session_on_v1(bundle, production, agent) -> Session:
    session, _ = session_start(bundle=bundle, actor=agent.actor, external_id="chat-42")
    return session


# --- groups and roles -----------------------------------------------------------------------


def test_it_creates_both_groups_with_their_permissions_on_migrate(db):
    for name, wanted in GROUP_PERMISSIONS.items():
        group = Group.objects.get(name=name)
        held = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
        assert held == set(wanted)
    assert "sessions_app.change_session" in GROUP_PERMISSIONS[OPS]
    assert "sessions_app.change_session" not in GROUP_PERMISSIONS[PROMPT_ENGINEERS]


def test_it_maps_users_to_actors_by_group(db):
    assert actor_for_user(make_user("a", is_superuser=True)).role == Role.ADMIN
    assert actor_for_user(make_user("b", OPS)).role == Role.OPS
    assert actor_for_user(make_user("c", PROMPT_ENGINEERS)).role == Role.PUBLISHER
    plain = actor_for_user(make_user("d"))
    assert plain.role == Role.AGENT
    assert plain.name == "user:d"


def test_it_sends_anonymous_people_to_the_login_page(db, bundle):
    response = Client().get(u("registry_bundle_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_it_refuses_staff_without_permissions_in_words(db, bundle):
    response = client_for(make_user("nobody")).get(u("adminui_bundle", "refunds"))
    assert response.status_code == 403
    assert "ask an admin to add you to a group" in text(response)


def test_a_group_member_without_staff_status_signs_in_and_leaving_the_groups_signs_them_out(db, bundle):
    """The README's steps: an admin adds a person and puts them in a group, nothing more."""
    user = User.objects.create_user(username="newbie", password="pw-newbie-1")
    assert not user.is_staff
    user.groups.add(Group.objects.get(name=PROMPT_ENGINEERS))
    client = Client()
    response = client.post("/admin/login/", {"username": "newbie", "password": "pw-newbie-1", "next": "/admin/"})
    assert response.status_code == 302, words(response)
    assert client.get(u("adminui_bundle", "refunds")).status_code == 200
    user.groups.clear()
    assert client.get(u("adminui_bundle", "refunds")).status_code == 302  # back to the login page
    response = Client().post("/admin/login/", {"username": "newbie", "password": "pw-newbie-1"})
    assert response.status_code == 200
    assert "an account in the group Prompt engineers or Ops" in words(response)


# --- bundles --------------------------------------------------------------------------------


def test_it_lists_bundles_with_label_targets_states_latest_and_active_sessions(
    engineer, bundle, v2_renamed, production, session_on_v1
):
    response = engineer.get(u("registry_bundle_changelist"))
    assert response.status_code == 200
    row = re.search(r'<tr data-bundle="refunds">(.*?)</tr>', response.content.decode(), re.S).group(1)
    assert "production" in row and "v1" in row and "state-live" in row
    assert ">v2<" in row  # latest version
    assert re.search(r"status=active\">1</a>", row)
    assert "Create a bundle" in text(response)


def test_label_pages_show_each_labels_compatibility(engineer, bundle, v1, production, ops):
    label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="r")
    listing = engineer.get(u("registry_bundle_changelist")).content.decode()
    row = re.search(r'<tr data-bundle="refunds">(.*?)</tr>', listing, re.S).group(1)
    lines = re.findall(r'<div class="label-line">(.*?)</div>', row, re.S)
    assert ["compatibility: backward" in line for line in lines] == [True, False]
    assert "compatibility: none" in lines[1]
    overview = engineer.get(u("adminui_bundle", "refunds")).content.decode()
    cells = dict(re.findall(r'<tr data-label="(\w+)">.*?<td[^>]*class="compatibility"[^>]*>(.*?)</td>', overview, re.S))
    assert "compatibility: backward" in cells["production"] and "compatibility: none" in cells["staging"]
    detail = words(engineer.get(u("adminui_version", "refunds", 1)))
    assert "production compatibility: backward staging compatibility: none" in detail
    move = engineer.get(u("adminui_move", "refunds")).content.decode()
    assert '<option value="staging">staging (compatibility: none)</option>' in move


def test_bundles_are_searchable_by_name_description_and_when_to_use(reader, bundle, ops):
    from registry.services import bundle_create

    bundle_create(
        name="billing", description="Invoices", when_to_use="When a customer asks for a copy", actor=ops.actor
    )
    listed = lambda response: re.findall(r'<tr data-bundle="([^"]+)"', response.content.decode())  # noqa: E731
    assert listed(reader.get(u("registry_bundle_changelist"))) == ["billing", "refunds"]
    assert listed(reader.get(u("registry_bundle_changelist", query="q=REFUND"))) == ["refunds"]
    assert listed(reader.get(u("registry_bundle_changelist", query="q=a+copy"))) == ["billing"]
    assert "No bundle matches “nothing”." in words(reader.get(u("registry_bundle_changelist", query="q=nothing")))


def test_the_versions_list_is_searchable_and_shows_iso_dates_and_labels(reader, bundle, v1, v2, production, ops):
    from registry.services import bundle_create

    other = bundle_create(name="billing", actor=ops.actor)
    version_publish(bundle=other, content=content("Bill them."), message="first bill", actor=ops.actor)
    listed = lambda response: re.findall(  # noqa: E731
        r'<tr data-bundle="([^"]+)" data-version="(\d+)"', response.content.decode()
    )
    response = reader.get(u("registry_bundleversion_changelist"))
    assert listed(response) == [("billing", "1"), ("refunds", "2"), ("refunds", "1")]
    page = main_part(response)
    created = v1.created_at.strftime("%Y-%m-%d %H:%M")
    assert created in page
    assert not re.search(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d", page)  # no US dates
    assert re.search(r'data-version="1">.*?production', page, re.S)
    assert listed(reader.get(u("registry_bundleversion_changelist", query="q=bill"))) == [("billing", "1")]
    assert listed(reader.get(u("registry_bundleversion_changelist", query="q=refunds@2"))) == [("refunds", "2")]
    prefix = v1.content_hash[:10]
    assert listed(reader.get(u("registry_bundleversion_changelist", query=f"q={prefix}"))) == [("refunds", "1")]
    assert listed(reader.get(u("registry_bundleversion_changelist", query="state=live"))) == [("refunds", "1")]


def test_the_labels_list_shows_readable_targets(reader, bundle, v1, v2, production, ops):
    label_move(bundle=bundle, name="staging", version=v2, actor=ops.actor, reason="try")
    response = reader.get(u("registry_label_changelist"))
    page = words(response)
    assert "production → v1 live" in page
    assert "staging → v2 live" in page
    assert not re.search(r"\b\d+@\d+\b", main_part(response))  # the stock "2@1"
    searched = reader.get(u("registry_label_changelist", query="q=prod"))
    assert re.findall(r'<tr data-bundle="refunds" data-label="([^"]+)"', searched.content.decode()) == ["production"]


def test_it_does_not_offer_bundle_creation_to_readers(reader, bundle):
    response = reader.get(u("registry_bundle_changelist"))
    assert response.status_code == 200
    assert "Create a bundle" not in text(response)
    assert reader.get(u("registry_bundle_add")).status_code == 403


def test_it_creates_a_bundle_through_the_service(engineer):
    response = engineer.post(u("registry_bundle_add"), {"name": "billing", "description": "Billing agent"})
    assert response.status_code == 302
    assert response["Location"] == u("adminui_version_new", "billing")
    assert Bundle.objects.get(name="billing").created_by == "user:pat"


def test_it_shows_a_bad_bundle_name_next_to_the_name_and_keeps_it(engineer, bundle):
    response = engineer.post(u("registry_bundle_add"), {"name": "Not Valid!", "description": "typed"})
    assert response.status_code == 400
    assert any("Must match" in e for e in field_errors(response, "name"))
    assert 'value="Not Valid!"' in response.content.decode()
    response = engineer.post(u("registry_bundle_add"), {"name": "refunds", "description": ""})
    assert response.status_code == 409
    assert field_errors(response, "name") == ["A bundle named 'refunds' already exists."]


def test_it_refuses_a_forged_bundle_creation_by_a_reader(reader):
    response = reader.post(u("registry_bundle_add"), {"name": "sneaky", "description": ""})
    assert response.status_code == 403
    assert not Bundle.objects.filter(name="sneaky").exists()


def test_it_redirects_the_stock_bundle_page_and_refuses_its_post(ops_user, bundle):
    change = reverse("admin:registry_bundle_change", args=[bundle.pk])
    assert ops_user.get(change)["Location"] == u("adminui_bundle", "refunds")
    assert ops_user.post(change, {"name": "renamed", "description": "x"}).status_code == 403
    assert ops_user.post(reverse("admin:registry_bundle_delete", args=[bundle.pk]), {"post": "yes"}).status_code == 403
    assert Bundle.objects.get(pk=bundle.pk).name == "refunds"


def test_it_offers_production_moves_only_to_ops(engineer, ops_user, bundle, v2_renamed, production):
    page = text(engineer.get(u("adminui_bundle", "refunds")))
    assert 'data-action="move"' not in page
    assert 'data-action="rollback"' not in page
    assert "Write a new version" in page
    page = text(ops_user.get(u("adminui_bundle", "refunds")))
    assert 'data-action="move"' in page


# --- writing a version ----------------------------------------------------------------------


def test_it_prefills_the_new_version_form_from_the_latest_or_a_chosen_version(engineer, bundle, v1, v2_renamed):
    page = text(engineer.get(u("adminui_version_new", "refunds")))
    assert "issue_refund" in page and "process_refund" not in page
    assert re.search(r'<textarea name="system_prompt"[^>]*class="adminui-code adminui-prompt"', page)
    page = text(engineer.get(u("adminui_version_new", "refunds", query="from=1")))
    assert "process_refund" in page


def version_post(**overrides) -> dict:
    doc = content("A new prompt.")
    data = {
        "system_prompt": doc["system_prompt"],
        "tools": json.dumps(doc["tools"], indent=2),
        "guardrails": "{}",
        "output_schema": "null",
        "model": json.dumps(doc["model"]),
        "metadata": "{}",
        "message": "new prompt",
    }
    data.update(overrides)
    return data


def test_it_shows_bad_json_in_tools_next_to_tools_and_keeps_the_typed_text(engineer, bundle, v1):
    typed = '[{"name": "lookup", "description": "x",, }]'
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(tools=typed, model="{nope"))
    assert response.status_code == 200
    assert field_errors(response, "tools") == [
        "This is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 40."
    ]
    assert field_errors(response, "model")[0].startswith("This is not valid JSON")
    assert typed in text(response)
    assert "Nothing was saved" in text(response)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_shows_content_errors_by_path_next_to_their_fields(engineer, bundle, v1):
    tools = json.dumps([{"name": "bad name", "description": "x", "input_schema": {}}])
    response = engineer.post(
        u("adminui_version_new", "refunds"), version_post(tools=tools, system_prompt="", guardrails="[]")
    )
    assert response.status_code == 400
    assert field_errors(response, "tools") == ["tools[0].name: Must match ^[A-Za-z_][A-Za-z0-9_-]{0,63}$."]
    assert field_errors(response, "system_prompt") == ["Must be 1 to 200000 characters long."]
    assert field_errors(response, "guardrails") == ["Must be a JSON object."]
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_requires_a_change_message_and_reports_content_errors_with_it(engineer, bundle, v1):
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(message="  ", metadata="[1]"))
    assert field_errors(response, "message") == ["Say what changed: a change message is required."]
    assert field_errors(response, "metadata") == ["Must be a JSON object."]
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


# Issue 5's failure modes at publish time: refused, with the exact place and what to do.


def test_it_refuses_a_prompt_that_names_a_missing_tool_next_to_the_prompt(engineer, bundle, v1):
    prompt = "You are a refund agent. Call `issue_refund` after checking the order, then {{tool:notify}}."
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(system_prompt=prompt))
    assert response.status_code == 400
    assert field_errors(response, "system_prompt") == [
        "The prompt references `issue_refund` (line 1, column 30), but the bundle has no tool of that name "
        "(did you mean `process_refund`?); fix the name or add the tool (if it is not a tool, list it in "
        "metadata.not_tools).",
        "The prompt references `{{tool:notify}}` (line 1, column 76), but the bundle has no tool of that name; "
        "fix the name or add the tool.",
    ]
    assert field_errors(response, "tools") == []
    assert prompt in text(response)  # what was typed is kept
    assert "Nothing was saved" in text(response)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_refuses_an_invalid_input_schema_with_its_exact_path(engineer, bundle, v1):
    tools = content()["tools"]
    tools[0]["input_schema"]["properties"]["amount"]["type"] = "strnig"
    typed = json.dumps(tools, indent=2)
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(tools=typed))
    assert response.status_code == 400
    assert field_errors(response, "tools") == [
        "tools[0].input_schema.properties.amount.type: `type` must be one of array, boolean, integer, null, "
        'number, object or string, or a list of them; got "strnig".'
    ]
    assert typed in text(response)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_refuses_guardrails_that_name_a_missing_tool_next_to_guardrails(engineer, bundle, v1):
    guardrails = {"default": "allow", "rules": [{"tool": "issue_refund", "effect": "confirm"}]}
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(guardrails=json.dumps(guardrails)))
    assert response.status_code == 400
    assert field_errors(response, "guardrails") == [
        "guardrails.rules[0].tool: The bundle has no tool `issue_refund` (did you mean `process_refund`?); "
        "fix the name."
    ]
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_shows_output_schema_and_metadata_contract_errors_next_to_their_fields(engineer, bundle, v1):
    response = engineer.post(
        u("adminui_version_new", "refunds"),
        version_post(output_schema='{"type": "objekt"}', metadata='{"not_tools": "snake_case"}'),
    )
    assert response.status_code == 400
    assert field_errors(response, "output_schema") == [
        "output_schema.type: `type` must be one of array, boolean, integer, null, number, object or string, "
        'or a list of them; got "objekt".'
    ]
    assert field_errors(response, "metadata") == [
        "metadata.not_tools: Must be a list of names the prompt uses that are not tools."
    ]


def test_it_reports_contract_errors_together_with_a_missing_message(engineer, bundle, v1):
    response = engineer.post(
        u("adminui_version_new", "refunds"), version_post(message="", system_prompt="Call `issue_refund`.")
    )
    assert field_errors(response, "message") == ["Say what changed: a change message is required."]
    assert field_errors(response, "system_prompt")[0].startswith("The prompt references `issue_refund`")
    # A field that did not parse is not checked as if it were empty: no misleading errors.
    response = engineer.post(
        u("adminui_version_new", "refunds"), version_post(message="", tools="[oops", system_prompt="Call `x_y`.")
    )
    assert field_errors(response, "tools")[0].startswith("This is not valid JSON")
    assert field_errors(response, "system_prompt") == []


def test_it_shows_the_warnings_and_the_classification_after_saving(engineer, bundle, v1):
    doc = renamed_tool_content()
    doc["system_prompt"] += " Never call process_refund twice."
    response = engineer.post(
        u("adminui_version_new", "refunds"),
        version_post(system_prompt=doc["system_prompt"], tools=json.dumps(doc["tools"]), message="rename"),
    )
    assert response.status_code == 302
    page = words(engineer.get(response["Location"]))
    assert "Contract check against v1: a major change (2 changes, listed below)." in page
    assert (
        "Warning, system_prompt: The prompt still mentions `process_refund` (line 1, column 82), which this "
        "version renames to `issue_refund`; reword it so the model does not try to call the old name." in page
    )
    assert "Contract check: major change major Tool `process_refund` was renamed to `issue_refund`" in page


def message_levels(response) -> dict[str, str]:
    return {m.message: m.level_tag for m in response.context["messages"]}


def test_a_major_change_is_reported_as_a_warning_and_a_minor_one_as_information(engineer, bundle, v1):
    doc = renamed_tool_content()
    response = engineer.post(
        u("adminui_version_new", "refunds"),
        version_post(system_prompt=doc["system_prompt"], tools=json.dumps(doc["tools"]), message="rename"),
        follow=True,
    )
    levels = message_levels(response)
    assert levels["Contract check against v1: a major change (2 changes, listed below)."] == "warning"
    assert '<li class="warning">Contract check against v1: a major change' in response.content.decode()
    doc = compatible_content()
    doc["tools"][0]["name"] = "issue_refund"
    response = engineer.post(
        u("adminui_version_new", "refunds"),
        version_post(
            system_prompt=doc["system_prompt"].replace("process_refund", "issue_refund"),
            tools=json.dumps(doc["tools"]),
            message="reason",
        ),
        follow=True,
    )
    assert [level for text, level in message_levels(response).items() if text.startswith("Contract check")] == ["info"]


def test_it_says_identical_content_exists_and_links_to_it(engineer, bundle, v1):
    doc = content()
    response = engineer.post(
        u("adminui_version_new", "refunds"),
        version_post(system_prompt=doc["system_prompt"], tools=json.dumps(doc["tools"]), message="same again"),
    )
    assert response.status_code == 200
    page = text(response)
    assert "identical to" in page
    assert f'href="{u("adminui_version", "refunds", 1)}"' in page
    assert "same again" in page  # what was typed is kept
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_it_saves_a_new_version_through_the_service(engineer, bundle, v1):
    response = engineer.post(u("adminui_version_new", "refunds"), version_post())
    assert response.status_code == 302
    assert response["Location"] == u("adminui_version", "refunds", 2)
    version = BundleVersion.objects.get(bundle=bundle, number=2)
    assert version.author == "user:pat"
    assert version.message == "new prompt"
    page = words(engineer.get(response["Location"]))
    assert "Saved version 2 of refunds." in page
    assert "Contract check against v1: a patch change" in page
    assert json.loads(bytes(version.canonical))["system_prompt"] == "A new prompt."


def test_it_refuses_a_forged_version_post_by_a_reader(reader, bundle, v1):
    assert reader.get(u("adminui_version_new", "refunds")).status_code == 403
    response = reader.post(u("adminui_version_new", "refunds"), version_post())
    assert response.status_code == 403
    assert "Publishing a version needs the publisher role" in text(response)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


# --- reading a version ----------------------------------------------------------------------


def test_it_shows_a_version_read_only_with_its_facts(reader, bundle, v1, v2_renamed, production, session_on_v1):
    response = reader.get(u("adminui_version", "refunds", 1))
    assert response.status_code == 200
    page = text(response)
    assert "You are a refund agent. Call `process_refund` after checking the order." in page
    assert '"name": "process_refund"' in page  # pretty-printed JSON
    assert v1.content_hash in page
    assert "key:test-ops" in page and "v1" in page
    assert 'class="state state-live"' in page
    assert re.search(r"status=active\">1</a>", page)
    assert '<span class="label-name protected">production</span>' in page
    main = main_part(response)
    assert '<form method="post"' not in main.lower()
    # The provider request's form is a GET preview (it writes nothing); the rest has no field.
    main = re.sub(r'<div class="adminui-prefix" id="provider-request">.*?</form>', "", main, flags=re.S)
    assert "<textarea" not in main and "<form" not in main and "<input" not in main
    assert "deletelink" not in main and "Delete" not in main
    assert "New version from this one" not in page  # a reader may not publish


def test_it_refuses_forged_posts_to_the_stock_version_change_and_delete_pages(ops_user, bundle, v1):
    change = reverse("admin:registry_bundleversion_change", args=[v1.pk])
    assert ops_user.get(change)["Location"] == u("adminui_version", "refunds", 1)
    response = ops_user.post(change, {"message": "rewritten", "author": "mallory", "content_hash": "0" * 64})
    assert response.status_code == 403
    response = ops_user.post(reverse("admin:registry_bundleversion_delete", args=[v1.pk]), {"post": "yes"})
    assert response.status_code == 403
    v1_now = BundleVersion.objects.get(pk=v1.pk)
    assert (v1_now.message, v1_now.author, v1_now.content_hash) == (v1.message, v1.author, v1.content_hash)


def test_it_refuses_forged_posts_to_stock_label_and_session_pages(
    ops_user, bundle, v1, v2_renamed, production, session_on_v1
):
    label_change = reverse("admin:registry_label_change", args=[production.pk])
    assert ops_user.post(label_change, {"version": v2_renamed.pk, "name": "production"}).status_code == 403
    assert (
        ops_user.post(reverse("admin:registry_label_delete", args=[production.pk]), {"post": "yes"}).status_code == 403
    )
    # No simple-history "revert" page: it would save a posted form around label_move.
    ops_user.post(f"{label_change.removesuffix('change/')}history/1/", {"version": v2_renamed.pk})
    assert Label.objects.get(pk=production.pk).version_id == v1.pk
    session_change = reverse("admin:sessions_app_session_change", args=[session_on_v1.pk])
    assert ops_user.get(session_change)["Location"] == u("adminui_session", session_on_v1.pk)
    assert ops_user.post(session_change, {"status": "ended"}).status_code == 403
    assert Session.objects.get(pk=session_on_v1.pk).status == SessionStatus.ACTIVE


def test_it_answers_unknown_bundles_and_versions_with_an_admin_404(reader, bundle, v1):
    response = reader.get(u("adminui_version", "refunds", 9))
    assert response.status_code == 404
    assert "has no version 9" in text(response)
    assert reader.get(u("adminui_bundle", "nope")).status_code == 404


def test_ops_revoke_a_version_from_its_page_after_seeing_the_impact(
    ops_user, agent, bundle, v1, v2_compatible, production, session_on_v1, ops
):
    label_move(bundle=bundle, name="production", version=v2_compatible, actor=ops.actor, reason="ship v2")
    page = ops_user.get(u("adminui_version", "refunds", 1)).content.decode()
    assert u("adminui_revoke", "refunds", 1) in page
    response = ops_user.get(u("adminui_revoke", "refunds", 1))
    assert response.status_code == 200
    assert "1 active session pinned to v1 gets 410 version_revoked on its next call and must start again" in words(
        response
    )
    assert "No label points at v1." in words(response)
    response = ops_user.post(u("adminui_revoke", "refunds", 1), {"reason": ""})
    assert field_errors(response, "reason") == ["Say why: a reason is required to revoke a version."]
    assert BundleVersion.objects.get(pk=v1.pk).state != VersionState.REVOKED
    response = ops_user.post(u("adminui_revoke", "refunds", 1), {"reason": "leaks the refund limit"}, follow=True)
    assert "Revoked v1 of refunds: its sessions get 410 version_revoked from their next call." in words(response)
    revoked = BundleVersion.objects.get(pk=v1.pk)
    assert (revoked.state, revoked.revoke_reason) == (VersionState.REVOKED, "leaks the refund limit")
    event = AuditEvent.objects.get(action="version.revoked")
    assert (event.actor, event.reason) == ("user:olga", "leaks the refund limit")
    # The same 410 the API's revoke gives the pinned agent.
    fetched = agent.get(f"/api/v1/sessions/{session_on_v1.pk}/bundle/")
    assert fetched.status_code == 410
    assert fetched.json()["error"]["code"] == "version_revoked"


def test_revoking_a_version_a_label_points_at_shows_the_labels_and_is_refused(ops_user, bundle, v1, production):
    response = ops_user.get(u("adminui_revoke", "refunds", 1))
    assert "1 label still points at v1: production." in words(response)
    assert re.search(r'id="revoke" disabled', response.content.decode())
    response = ops_user.post(u("adminui_revoke", "refunds", 1), {"reason": "forged"})
    assert response.status_code == 409
    assert "Version 1 is targeted by production; move those labels first." in words(response)
    assert BundleVersion.objects.get(pk=v1.pk).state == VersionState.LIVE


def test_prompt_engineers_are_not_offered_revoke_and_a_forged_one_is_refused(engineer, bundle, v1, v2):
    assert u("adminui_revoke", "refunds", 1) not in engineer.get(u("adminui_version", "refunds", 1)).content.decode()
    assert engineer.get(u("adminui_revoke", "refunds", 1)).status_code == 403
    response = engineer.post(u("adminui_revoke", "refunds", 1), {"reason": "sneak"})
    assert response.status_code == 403
    assert BundleVersion.objects.get(pk=v1.pk).state != VersionState.REVOKED


# --- diff -----------------------------------------------------------------------------------


def test_it_diffs_against_the_version_before_by_default(reader, bundle, v1, v2_renamed):
    response = reader.get(u("adminui_diff", "refunds"))
    assert response.status_code == 200
    page = response.content.decode()
    assert re.search(r'<tr class="tool-removed"><td><code>process_refund</code>', page)
    assert re.search(r'<tr class="tool-added"><td><code>issue_refund</code>', page)
    assert "probably renamed from process_refund" in page
    # registry.contracts' classification of the same change.
    assert "Contract check: major change" in words(response)
    assert "was renamed to `issue_refund`" in unescape(page)
    # The prompt line is paired, and only the changed word is marked on each side.
    assert '<span class="word-del">process_refund</span>' in page
    assert '<span class="word-ins">issue_refund</span>' in page
    explicit = reader.get(u("adminui_diff", "refunds", query="old=1&new=2")).content.decode()
    assert explicit.split('id="prompt-diff"')[1] == page.split('id="prompt-diff"')[1]


def test_it_diffs_any_two_versions_and_names_the_changed_tool_fields(reader, bundle, v1, v2_renamed, ops):
    doc = content("Third.")
    doc["tools"][0]["description"] = "Refund an order, fully or partly."
    doc["tools"][0]["input_schema"]["properties"]["amount"] = {"type": "integer"}
    version_publish(bundle=bundle, content=doc, message="v3", actor=ops.actor)
    response = reader.get(u("adminui_diff", "refunds", query="old=1&new=3"))
    page = response.content.decode()
    assert re.search(
        r'<tr class="tool-changed"><td><code>process_refund</code>'
        r".*?description, input_schema\.properties\.amount\.type",
        page,
        re.S,
    )
    same = reader.get(u("adminui_diff", "refunds", query="old=2&new=2"))
    assert "have the same content" in text(same)


def test_side_by_side_pairs_replaced_lines_and_marks_words():
    rows = side_by_side("one two three\nkeep", "one 2 three\nkeep\nadded")
    assert [r.kind for r in rows] == ["replace", "equal", "insert"]
    assert '<span class="word-del">two</span>' in rows[0].left
    assert '<span class="word-ins">2</span>' in rows[0].right
    assert rows[2].left_no is None and rows[2].right_no == 3
    assert "<b>" not in side_by_side("<b>", "<i>")[0].left  # escaped
    assert side_by_side("<b>", "<b>")[0].left == "&lt;b&gt;"


def test_tool_changes_lists_added_removed_and_changed_fields():
    old = [{"name": "a", "description": "x", "input_schema": {}}, {"name": "b", "description": "y", "input_schema": {}}]
    new = [{"name": "a", "description": "z", "input_schema": {}}, {"name": "c", "description": "q", "input_schema": {}}]
    changes = {(c.name, c.kind): c for c in tool_changes(old, new)}
    assert set(changes) == {("a", "changed"), ("b", "removed"), ("c", "added")}
    assert changes[("a", "changed")].fields == ["description"]
    assert changes[("c", "added")].note == ""


# --- moving labels --------------------------------------------------------------------------


def test_it_does_not_offer_production_to_a_prompt_engineer(engineer, bundle, v1, v2_renamed, production):
    page = engineer.get(u("adminui_move", "refunds")).content.decode()
    assert '<option value="production"' not in page
    assert "production (protected: only the Ops group may move it)" in unescape(page)
    response = engineer.get(u("adminui_move", "refunds", query="label=production&version=2"))
    assert response.status_code == 403


def test_it_refuses_a_forged_production_move_by_a_prompt_engineer(engineer, bundle, v1, v2_renamed, production):
    form = {"label": "production", "version": "2", "reason": "sneak", "confirm": "yes", "expected_revision": "1"}
    response = engineer.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 403
    assert field_errors(response, "label") == ["The label 'production' is protected: only ops may move it."]
    assert Label.objects.get(pk=production.pk).version_id == v1.pk
    # Nor may a prompt engineer create production on a bundle that has none.
    Label.objects.filter(pk=production.pk).delete()
    form = {
        "label": "",
        "new_label": "production",
        "version": "2",
        "reason": "sneak",
        "confirm": "yes",
        "expected_revision": "",
    }
    response = engineer.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 403
    assert not Label.objects.filter(bundle=bundle, name="production").exists()


def test_it_shows_the_consequence_and_moves_nothing_before_confirm(
    ops_user, bundle, v1, v2_renamed, production, session_on_v1
):
    response = ops_user.post(
        u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "ship the rename"}
    )
    assert response.status_code == 200
    page = words(response)
    assert "production moves from v1 to v2" in page
    assert "v2 becomes live" in page
    assert "v1 starts draining: 1 active session is still pinned to it" in page
    assert "ship the rename" in page
    assert "What changes for agents on production (v1 → v2) Contract check: major change" in page
    assert Label.objects.get(pk=production.pk).version_id == v1.pk
    assert BundleVersion.objects.get(pk=v1.pk).state == VersionState.LIVE


def classification_items(response) -> list[str]:
    block = re.search(r'<div class="adminui-classification[^>]*id="classification">(.*?)</div>', text(response), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", li).split()) for li in re.findall(r"<li>(.*?)</li>", block.group(1), re.S)]


def test_the_confirm_page_states_a_major_move_and_offers_ops_the_override(ops_user, bundle, v1, v2_renamed, production):
    response = ops_user.post(
        u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "ship the rename"}
    )
    page = words(response)
    assert (
        "production requires backward compatibility, and v2 is a major change against v1, its current target: "
        "1 breaking change, listed first below." in page
    )
    assert "The move will be refused unless you tick “Allow this breaking change” below." in page
    # The changes, most severe first, in words and with their paths.
    items = classification_items(response)
    assert items[0] == (
        "major Tool `process_refund` was renamed to `issue_refund`; agents that call the old name will fail. "
        "tools[process_refund].name"
    )
    assert items[1].startswith("patch The system prompt's wording changed")
    html = response.content.decode()
    assert '<input type="checkbox" name="allow_breaking" value="yes" id="allow-breaking">' in html
    assert "Your reason, “ship the rename”, is recorded in the history with the override." in words(response)


def test_a_compatible_move_passes_the_check_without_an_override(ops_user, bundle, v1, v2_compatible, production):
    response = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "r"})
    page = words(response)
    assert (
        "production requires backward compatibility: v2 is a minor change against v1, its current target, "
        "so the check passes." in page
    )
    assert classification_items(response)[0].startswith("minor Parameter `reason` of tool `process_refund`")
    assert "allow_breaking" not in response.content.decode()


def test_it_moves_production_for_ops_on_confirm(ops_user, bundle, v1, v2_compatible, production, session_on_v1):
    form = {
        "label": "production",
        "version": "2",
        "reason": "ship the reason",
        "confirm": "yes",
        "expected_revision": "1",
    }
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 302
    label = Label.objects.get(pk=production.pk)
    assert label.version_id == v2_compatible.pk
    assert label.updated_by == "user:olga"
    assert label.history.first().history_change_reason == "ship the reason"
    assert label.history.first().move_note == "compatibility check passed: minor against version 1"
    assert BundleVersion.objects.get(pk=v1.pk).state == VersionState.DRAINING
    page = text(ops_user.get(response["Location"]))
    assert "Moved production: it now targets v2. v1 is draining with 1 active session." in page


def test_it_refuses_a_breaking_production_move_without_the_override_and_says_why(
    ops_user, bundle, v1, v2_renamed, production, session_on_v1
):
    form = {
        "label": "production",
        "version": "2",
        "reason": "ship the rename",
        "confirm": "yes",
        "expected_revision": "1",
    }
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 409
    page = words(response)
    assert (
        "Nothing moved: production requires backward compatibility, and v2 is a major change against v1, "
        "its current target." in page
    )
    refused = re.search(r'<ul id="refused-changes">(.*?)</ul>', text(response), re.S).group(1)
    assert re.findall(r"<li>(.*?)</li>", refused) == [
        "Tool `process_refund` was renamed to `issue_refund`; agents that call the old name will fail. "
        "<code>tools[process_refund].name</code>"
    ]
    assert "or tick “Allow this breaking change” below and confirm again" in page
    assert 'id="allow-breaking"' in response.content.decode()  # the same page, ready to confirm again
    label = Label.objects.get(pk=production.pk)
    assert label.version_id == v1.pk
    assert label.history.count() == 1
    assert BundleVersion.objects.get(pk=v1.pk).state == VersionState.LIVE
    assert BundleVersion.objects.get(pk=v2_renamed.pk).state == VersionState.UNRELEASED


def test_ops_allow_a_breaking_production_move_and_the_history_records_it(
    ops_user, bundle, v1, v2_renamed, production, session_on_v1
):
    form = {
        "label": "production",
        "version": "2",
        "reason": "ship the rename, agents updated",
        "confirm": "yes",
        "expected_revision": "1",
        "allow_breaking": "yes",
    }
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 302
    label = Label.objects.get(pk=production.pk)
    assert label.version_id == v2_renamed.pk
    newest = label.history.first()
    assert newest.history_change_reason == "ship the rename, agents updated"
    assert newest.move_note == "breaking change allowed (allow_breaking): 1 major change(s) against version 1"
    assert BundleVersion.objects.get(pk=v1.pk).state == VersionState.DRAINING
    history = ops_user.get(u("adminui_history", "refunds")).content.decode()
    row = re.search(r'<tr data-label="production" data-to="2">(.*?)</tr>', history, re.S).group(1)
    assert "breaking change allowed (allow_breaking): 1 major change(s) against version 1" in row
    assert "ship the rename, agents updated" in unescape(row)


def test_a_prompt_engineer_is_not_offered_the_override_and_a_forged_one_is_refused(
    engineer, bundle, v1, v2_renamed, production
):
    # A forged step 1 for production is refused there, with no confirm page and no checkbox...
    response = engineer.post(u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "x"})
    assert response.status_code == 403
    assert "allow_breaking" not in response.content.decode()
    assert field_errors(response, "label") == ["The label 'production' is protected: only ops may move it."]
    # ...and a forged confirm that ticks it anyway is refused by the service.
    form = {
        "label": "production",
        "version": "2",
        "reason": "sneak",
        "confirm": "yes",
        "expected_revision": "1",
        "allow_breaking": "yes",
    }
    response = engineer.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 403
    assert field_errors(response, "label") == ["The label 'production' is protected: only ops may move it."]
    label = Label.objects.get(pk=production.pk)
    assert (label.version_id, label.history.count()) == (v1.pk, 1)


def test_an_unprotected_label_that_requires_compatibility_is_checked_for_prompt_engineers_too(
    engineer, bundle, v1, v2_renamed, ops
):
    """The service lets whoever may move a label allow a breaking move of it; so does the page."""
    label_move(bundle=bundle, name="canary", version=v1, actor=ops.actor, reason="r", compatibility="backward")
    form = {"label": "canary", "version": "2", "reason": "try", "confirm": "yes", "expected_revision": "1"}
    response = engineer.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 409
    assert 'id="allow-breaking"' in response.content.decode()
    assert Label.objects.get(bundle=bundle, name="canary").version_id == v1.pk
    response = engineer.post(u("adminui_move", "refunds"), {**form, "allow_breaking": "yes"})
    assert response.status_code == 302
    assert Label.objects.get(bundle=bundle, name="canary").version_id == v2_renamed.pk


def test_a_label_without_compatibility_is_moved_unchecked(engineer, bundle, v1, v2_renamed, ops):
    label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="r")
    response = engineer.post(u("adminui_move", "refunds"), {"label": "staging", "version": "2", "reason": "r"})
    page = words(response)
    assert "staging does not require compatibility (compatibility: none): the move is not checked." in page
    assert "Contract check: major change" in page  # still shown, for information
    assert "allow_breaking" not in response.content.decode()
    form = {"label": "staging", "version": "2", "reason": "r", "confirm": "yes", "expected_revision": "1"}
    assert engineer.post(u("adminui_move", "refunds"), form).status_code == 302


def test_a_new_production_label_says_it_will_require_compatibility(ops_user, bundle, v1):
    response = ops_user.post(u("adminui_move", "refunds"), {"new_label": "production", "version": "1", "reason": "r"})
    assert (
        "Creating a label is not checked. production will be created with compatibility: backward: later moves "
        "to a version that is major against its target will be refused" in words(response)
    )


def test_it_asks_again_when_the_label_moved_after_the_confirm_page(ops_user, bundle, v1, v2_renamed, production, ops):
    v3 = version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=v3, actor=ops.actor, reason="someone else")
    form = {"label": "production", "version": "2", "reason": "mine", "confirm": "yes", "expected_revision": "1"}
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 200
    assert "The label moved since you reviewed it" in text(response)
    assert "production moves from v3 to v2" in words(response)
    assert Label.objects.get(pk=production.pk).version_id == v3.pk


def test_it_requires_a_reason_for_a_move(ops_user, bundle, v1, v2_renamed, production):
    response = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": ""})
    assert field_errors(response, "reason") == ["Say why: a reason is required for every move."]
    response = ops_user.post(
        u("adminui_move", "refunds"),
        {"label": "production", "version": "2", "reason": "   ", "confirm": "yes", "expected_revision": "1"},
    )
    assert field_errors(response, "reason") == ["Say why: a reason is required for every move."]
    assert Label.objects.get(pk=production.pk).version_id == v1.pk


def test_a_prompt_engineer_typing_production_is_refused_at_the_first_step(engineer, bundle, v1, v2_renamed, production):
    response = engineer.post(
        u("adminui_move", "refunds"), {"label": "", "new_label": "production", "version": "2", "reason": "ship"}
    )
    assert response.status_code == 403
    assert field_errors(response, "new_label") == ["The label 'production' is protected: only ops may move it."]
    assert "Step 1 of 2" in words(response)  # still the form, not the confirm page
    # On a bundle without production yet, the name is created protected: the same answer.
    Label.objects.filter(pk=production.pk).delete()
    response = engineer.post(
        u("adminui_move", "refunds"), {"label": "", "new_label": "production", "version": "2", "reason": "ship"}
    )
    assert response.status_code == 403
    assert field_errors(response, "new_label") == ["The label 'production' is protected: only ops may move it."]
    # Any other new name goes on to the confirm page.
    response = engineer.post(
        u("adminui_move", "refunds"), {"label": "", "new_label": "canary", "version": "2", "reason": "try"}
    )
    assert response.status_code == 200
    assert "Step 2 of 2" in words(response)


def test_a_prompt_engineer_creates_and_moves_an_unprotected_label(engineer, bundle, v1, v2_renamed, production):
    form = {
        "label": "",
        "new_label": "staging",
        "version": "2",
        "reason": "try it",
        "confirm": "yes",
        "expected_revision": "",
    }
    assert engineer.post(u("adminui_move", "refunds"), form).status_code == 302
    staging = Label.objects.get(bundle=bundle, name="staging")
    assert (staging.version_id, staging.protected, staging.updated_by) == (v2_renamed.pk, False, "user:pat")
    page = engineer.get(u("adminui_move", "refunds")).content.decode()
    assert '<option value="staging"' in page
    form = {"label": "staging", "version": "1", "reason": "back", "confirm": "yes", "expected_revision": "1"}
    assert engineer.post(u("adminui_move", "refunds"), form).status_code == 302
    assert Label.objects.get(pk=staging.pk).version_id == v1.pk


def test_it_says_when_the_label_already_targets_the_version(ops_user, bundle, v1, production):
    response = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "1", "reason": "noop"})
    assert field_errors(response, "version") == ["production already targets v1: there is nothing to move."]


# --- rollback -------------------------------------------------------------------------------


@pytest.fixture
def production_on_v2(bundle, v1, v2_renamed, production, ops):
    label_move(
        bundle=bundle, name="production", version=v2_renamed, actor=ops.actor, reason="ship v2", allow_breaking=True
    )
    return Label.objects.get(pk=production.pk)


def test_it_rolls_back_for_ops_after_confirm(ops_user, bundle, v1, production_on_v2):
    page = ops_user.get(u("adminui_rollback", "refunds", "production")).content.decode()
    assert re.search(r'<option value="1" selected>v1 \(drained\)', page)
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "1", "reason": "v2 confuses"})
    page = words(response)
    assert "production moves from v2 to v1" in page
    # v1 is major against v2 (the tool's old name comes back), but a rollback is exempt.
    assert (
        "The compatibility check does not apply to this move. production requires backward compatibility, but v1 "
        "was this label's target before: the move returns to a state that was already live under production "
        "(a rollback), and ops must be able to undo at once. The history records that the check was not applied."
    ) in page
    assert "Contract check: major change" in page
    assert "allow_breaking" not in response.content.decode()
    assert Label.objects.get(pk=production_on_v2.pk).version_id != v1.pk
    form = {"version": "1", "reason": "v2 confuses", "confirm": "yes", "expected_revision": "2"}
    assert ops_user.post(u("adminui_rollback", "refunds", "production"), form).status_code == 302
    label = Label.objects.get(pk=production_on_v2.pk)
    assert label.version_id == v1.pk
    assert label.history.first().history_change_reason == "v2 confuses"
    assert label.history.first().move_note == (
        "compatibility check not applied: version 1 was this label's target before (rollback)"
    )


def test_a_move_back_to_a_previous_target_is_exempt_too(ops_user, bundle, v1, production_on_v2):
    response = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "1", "reason": "back"})
    assert "The compatibility check does not apply to this move." in words(response)
    assert "allow_breaking" not in response.content.decode()
    form = {"label": "production", "version": "1", "reason": "back", "confirm": "yes", "expected_revision": "2"}
    assert ops_user.post(u("adminui_move", "refunds"), form).status_code == 302
    label = Label.objects.get(pk=production_on_v2.pk)
    assert label.version_id == v1.pk
    assert label.move_note == "compatibility check not applied: version 1 was this label's target before (rollback)"


def test_it_refuses_rollback_to_a_prompt_engineer(engineer, bundle, v1, production_on_v2):
    assert engineer.get(u("adminui_rollback", "refunds", "production")).status_code == 403
    form = {"version": "1", "reason": "sneak", "confirm": "yes", "expected_revision": "2"}
    response = engineer.post(u("adminui_rollback", "refunds", "production"), form)
    assert response.status_code == 403
    assert "Rolling back needs the ops role" in text(response)
    assert Label.objects.get(pk=production_on_v2.pk).version.number == 2


def test_a_rollback_to_a_version_the_label_never_had_is_judged_like_a_move(ops_user, bundle, v1, production_on_v2, ops):
    version_publish(bundle=bundle, content=content("three"), message="v3", actor=ops.actor)
    form = {"version": "3", "reason": "x", "confirm": "yes", "expected_revision": "2"}
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), form)
    # v3 brings back the tool v2 renamed: major against v2, so it is refused without the box.
    assert response.status_code == 409
    assert Label.objects.get(bundle=bundle, name="production").version.number == 2


def offered_versions(response) -> list[str]:
    select = re.search(r'<select name="version"[^>]*>(.*?)</select>', response.content.decode(), re.S)
    return re.findall(r'<option value="(\d+)"', select.group(1))


def test_the_rollback_form_offers_only_previous_targets_after_a_validation_error(
    ops_user, bundle, v1, production_on_v2
):
    assert offered_versions(ops_user.get(u("adminui_rollback", "refunds", "production"))) == ["1"]
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "1", "reason": ""})
    assert field_errors(response, "reason") == ["Say why: a reason is required for a rollback."]
    assert offered_versions(response) == ["1"]


def test_a_rollback_to_the_current_target_is_an_error_not_a_confirm_page(ops_user, bundle, v1, production_on_v2):
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "2", "reason": "again"})
    assert "production moves from v2 to v2" not in words(response)
    assert field_errors(response, "version") == ["production already targets v2: there is nothing to roll back."]
    assert offered_versions(response) == ["1"]
    # A forged confirm is refused by the service as well.
    form = {"version": "2", "reason": "again", "confirm": "yes", "expected_revision": "2"}
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), form)
    assert response.status_code != 302
    assert Label.objects.get(pk=production_on_v2.pk).history.count() == 2


def test_the_rollback_service_refuses_a_no_op(bundle, v1, production, ops):
    from core.errors import Conflict
    from registry.services import label_rollback

    with pytest.raises(Conflict, match="already targets version 1"):
        label_rollback(bundle=bundle, name="production", to_version=v1, actor=ops.actor, reason="noop")


# --- history, drain, sessions ---------------------------------------------------------------


def test_it_shows_every_move_with_who_when_from_to_why_and_a_diff_link(reader, bundle, v1, production_on_v2):
    response = reader.get(u("adminui_history", "refunds"))
    assert response.status_code == 200
    page = response.content.decode()
    rows = re.findall(r'<tr data-label="production" data-to="(\d)">(.*?)</tr>', page, re.S)
    assert [to for to, _ in rows] == ["2", "1"]
    newest = unescape(rows[0][1])
    assert "ship v2" in newest and "key:test-ops" in newest and ">v1<" in newest
    assert "breaking change allowed (allow_breaking): 1 major change(s) against version 1" in newest
    assert f'href="{u("adminui_diff", "refunds", query="old=1&amp;new=2")}"' in rows[0][1]
    assert "created" in rows[1][1] and "first release" in rows[1][1]
    assert "compatibility: backward" in rows[1][1]
    assert "rename tool" in page  # each version's message


def test_a_compatibility_change_is_a_policy_row_in_the_history(reader, bundle, v1, production, ops):
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="relax", compatibility="none")
    page = reader.get(u("adminui_history", "refunds")).content.decode()
    rows = re.findall(r'<tr data-label="production" data-to="1">(.*?)</tr>', page, re.S)
    # Issue 36: recorded as a PATCH of the policy is (newest first), naming who and why.
    assert len(rows) == 2 and "relax" in rows[0] and "policy: compatibility" in rows[0]
    assert ops.actor.name in rows[0]
    assert AuditEvent.objects.filter(action="label.policy_changed", reason="relax").exists()


def test_the_drain_dashboard_shows_draining_versions_with_their_sessions(
    reader, bundle, v1, session_on_v1, production_on_v2, ops
):
    version_publish(bundle=bundle, content=content("never released"), message="v3", actor=ops.actor)
    page = reader.get(u("adminui_drain")).content.decode()
    v1_row = re.search(r'<tr data-version="1" data-state="draining">(.*?)</tr>', page, re.S).group(1)
    assert ">1</a>" in v1_row
    assert re.search(r'class="draining-since">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d<', v1_row)
    assert 'data-version="3"' not in page  # unreleased
    assert "drain.js" in page
    data = reader.get(u("adminui_drain_json")).json()
    versions = {v["number"]: v for v in data["bundles"][0]["versions"]}
    assert versions[1]["state"] == "draining" and versions[1]["active_sessions"] == 1
    assert versions[2]["labels"] == ["production"]
    assert 3 not in versions


def test_it_searches_sessions_by_bundle_version_status_and_external_id(reader, bundle, v1, session_on_v1, agent):
    other, _ = session_start(bundle=bundle, actor=agent.actor, external_id="other-chat")
    url = u("sessions_app_session_changelist")
    assert str(session_on_v1.pk) in reader.get(url, {"q": "chat-42"}).content.decode()
    assert str(other.pk) not in reader.get(url, {"q": "chat-42"}).content.decode()
    assert str(other.pk) in reader.get(url, {"q": str(other.pk)}).content.decode()
    assert str(other.pk) in reader.get(url, {"bundle": "refunds", "version": 1, "status": "active"}).content.decode()
    assert "No session matches" in text(reader.get(url, {"version": 2}))
    assert "No session matches" in text(reader.get(url, {"status": "ended"}))


def test_it_shows_a_session_with_its_pinned_version_and_lease(reader, bundle, v1, session_on_v1):
    page = text(reader.get(u("adminui_session", session_on_v1.pk)))
    assert "chat-42" in page and "v1" in page and "1800 s" in page and "left)" in page
    assert "End this session" not in page


def test_ops_end_a_session_and_prompt_engineers_cannot(engineer, ops_user, bundle, v1, session_on_v1):
    assert "End this session" not in text(engineer.get(u("adminui_session", session_on_v1.pk)))
    response = engineer.post(u("adminui_session_end", session_on_v1.pk))
    assert response.status_code == 403
    assert Session.objects.get(pk=session_on_v1.pk).status == SessionStatus.ACTIVE
    assert "End this session" in text(ops_user.get(u("adminui_session", session_on_v1.pk)))
    assert ops_user.get(u("adminui_session_end", session_on_v1.pk)).status_code == 405
    response = ops_user.post(u("adminui_session_end", session_on_v1.pk))
    assert response.status_code == 302
    assert Session.objects.get(pk=session_on_v1.pk).status == SessionStatus.ENDED


def test_a_prompt_engineer_edits_when_to_use_and_the_catalog_shows_it(engineer, reader, bundle, production):
    assert reader.get(u("adminui_bundle_edit", "refunds")).status_code == 403
    page = engineer.get(u("adminui_bundle_edit", "refunds"))
    assert page.status_code == 200 and "when_to_use" in page.content.decode()
    etag = re.search(r'name="etag" value="([^"]+)"', page.content.decode()).group(1)
    response = engineer.post(
        u("adminui_bundle_edit", "refunds"),
        {"description": "Refunds", "when_to_use": "Refund questions.", "etag": unescape(etag)},
    )
    assert response.status_code == 302
    bundle.refresh_from_db()
    assert (bundle.description, bundle.when_to_use) == ("Refunds", "Refund questions.")
    assert AuditEvent.objects.filter(action="bundle.updated", target="refunds").exists()
    from access.models import Role
    from tests.conftest import make_api

    catalog = make_api(Role.AGENT, name="cat").get("/api/v1/catalog/").json()["results"]
    assert catalog[0]["when_to_use"] == "Refund questions."


def test_a_bundle_edit_over_someone_elses_change_is_refused_with_412(engineer, bundle, production):
    # Issue 36 (carried over): two editors of a bundle overwrote each other without a precondition.
    page = engineer.get(u("adminui_bundle_edit", "refunds")).content.decode()
    read = unescape(re.search(r'name="etag" value="([^"]+)"', page).group(1))
    first = engineer.post(u("adminui_bundle_edit", "refunds"), {"description": "A", "when_to_use": "a", "etag": read})
    assert first.status_code == 302
    second = engineer.post(u("adminui_bundle_edit", "refunds"), {"description": "B", "when_to_use": "b", "etag": read})
    assert second.status_code == 412 and "changed since you read it" in second.content.decode()
    bundle.refresh_from_db()
    assert (bundle.description, bundle.when_to_use) == ("A", "a")


def test_a_forged_edit_post_from_a_reader_is_refused(reader, bundle):
    response = reader.post(u("adminui_bundle_edit", "refunds"), {"description": "x", "when_to_use": "y"})
    assert response.status_code == 403
    bundle.refresh_from_db()
    assert bundle.description == "Refund agent"


# --- accessibility --------------------------------------------------------------------------


class _Ids(HTMLParser):
    """Every id in a page, and every aria-describedby reference with the tag that makes it."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.described: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for ref in (attrs.get("aria-describedby") or "").split():
            self.described.append((f"<{tag} name={attrs.get('name')!r}>", ref))


def missing_describedby_targets(response) -> list[tuple[str, str]]:
    parser = _Ids()
    parser.feed(response.content.decode())
    return [(tag, ref) for tag, ref in parser.described if ref not in parser.ids]


def test_every_aria_describedby_on_the_admin_forms_points_at_an_element_that_exists(
    engineer, ops_user, bundle, v1, v2_renamed, production_on_v2, session_on_v1
):
    """Django puts aria-describedby="<id>_helptext <id>_error" on fields; the templates must
    render those ids. Every form page, clean and with errors."""
    pages = {
        "bundle add": engineer.get(u("registry_bundle_add")),
        "bundle add, errors": engineer.post(u("registry_bundle_add"), {"name": "Not A Name!"}),
        "bundle edit": engineer.get(u("adminui_bundle_edit", "refunds")),
        "new version": engineer.get(u("adminui_version_new", "refunds")),
        "new version, errors": engineer.post(u("adminui_version_new", "refunds"), version_post(tools="[{", message="")),
        "move": engineer.get(u("adminui_move", "refunds")),
        "move, errors": engineer.post(u("adminui_move", "refunds"), {"new_label": "Bad Name", "version": "9"}),
        "rollback": ops_user.get(u("adminui_rollback", "refunds", "production")),
        "rollback, errors": ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "1"}),
        "revoke": ops_user.get(u("adminui_revoke", "refunds", 1)),
        "revoke, errors": ops_user.post(u("adminui_revoke", "refunds", 1), {"reason": ""}),
        "sessions": engineer.get(u("sessions_app_session_changelist")),
        "sessions, errors": engineer.get(u("sessions_app_session_changelist", query="version=x")),
        "versions": engineer.get(u("registry_bundleversion_changelist")),
        "versions, errors": engineer.get(u("registry_bundleversion_changelist", query="state=nope")),
        "login": Client().get("/admin/login/"),
    }
    described = 0
    for name, response in pages.items():
        assert response.status_code in (200, 400, 403, 409), (name, response.status_code)
        assert missing_describedby_targets(response) == [], name
        described += response.content.decode().count("aria-describedby")
    assert described >= 20  # the check saw the references it is about


def test_the_error_summary_is_focusable_and_links_each_field(engineer, bundle, v1):
    response = engineer.post(u("adminui_version_new", "refunds"), version_post(tools="[{", message=""))
    page = response.content.decode()
    assert re.search(r'id="error-summary" tabindex="-1"', page)
    assert '<a href="#id_tools">Tools</a>: This is not valid JSON' in unescape(page)
    assert '<a href="#id_message">Change message</a>: Say what changed' in unescape(page)


CSS = Path(__file__).resolve().parents[2] / "adminui" / "static" / "adminui" / "adminui.css"


def _luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    channels = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""
    high, low = sorted([_luminance(a), _luminance(b)], reverse=True)
    return (high + 0.05) / (low + 0.05)


def badge_colours() -> dict[str, tuple[str, str]]:
    """{selector: (text colour, background)} for every badge class in adminui.css: the base
    `.state` rule sets white text on a grey; the state-, status-, tool- and level- rules
    change the background."""
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S))
    base_text = base_bg = None
    out = {}
    for selectors, body in rules:
        decl = dict(re.findall(r"([\w-]+)\s*:\s*([^;]+)", body))
        for selector in (s.strip() for s in selectors.split(",")):
            if selector == ".state":
                base_text, base_bg = decl["color"].strip(), decl["background"].strip()
                out[selector] = (base_text, base_bg)
            elif re.fullmatch(r"\.(state|status|tool|level)-[\w-]+", selector) and "background" in decl:
                out[selector] = (decl.get("color", base_text).strip(), decl["background"].strip())
    return out


def test_every_state_badge_meets_wcag_aa_contrast():
    colours = badge_colours()
    assert {".state", ".state-live", ".state-draining", ".state-drained", ".state-revoked", ".state-unreleased"} <= set(
        colours
    )
    assert contrast("#fff", "#e08600") == pytest.approx(2.77, abs=0.01)  # draining before: the check can fail
    low = {sel: round(contrast(*pair), 2) for sel, pair in colours.items() if contrast(*pair) < 4.5}
    assert low == {}


# --- percentage rollouts, If-Match, usage, release history (issue 14) -------------------------


def split_post(rows: list[tuple[str, str]], **fields) -> dict:
    """A move form posting a split: rows of (version, weight), the single version left empty."""
    form = {"label": "production", "version": "", "reason": "ramp v2", **fields}
    for row, (version, weight) in enumerate(rows, 1):
        form[f"split_version_{row}"], form[f"split_weight_{row}"] = version, weight
    return form


def test_the_move_page_offers_a_split_and_prefills_a_split_labels_weights(
    ops_user, bundle, v1, v2_compatible, production, ops
):
    page = ops_user.get(u("adminui_move", "refunds", query="label=production")).content.decode()
    assert 'name="split_version_1"' in page and 'name="split_weight_1"' in page
    assert "Or split new sessions between versions" in page
    label_move(bundle=bundle, name="production", targets=[(v1, 90), (v2_compatible, 10)], actor=ops.actor, reason="r")
    page = ops_user.get(u("adminui_move", "refunds", query="label=production")).content.decode()
    assert re.search(r'name="split_weight_1" value="90"', page) and re.search(r'name="split_weight_2" value="10"', page)


@pytest.mark.parametrize(
    "rows, field, message",
    [
        ([("1", "90"), ("2", "20")], "targets", "The weights must sum to 100. These add up to 110."),
        ([("1", "50"), ("1", "50")], "targets", "Each version at most once."),
        ([("1", "150"), ("2", "-50")], "split_weight_1", "An integer from 0 to 100."),
        ([("1", "90"), ("", "10")], "split_version_2", "Pick the version this weight is for."),
        ([("1", "90"), ("2", "")], "split_weight_2", "Give v2 a weight (0 to 100)."),
    ],
)
def test_a_bad_split_is_explained_next_to_its_field_and_moves_nothing(
    ops_user, bundle, v1, v2_compatible, production, rows, field, message
):
    response = ops_user.post(u("adminui_move", "refunds"), split_post(rows))
    assert field_errors(response, field) == [message]
    assert "Step 1 of 2" in words(response)
    assert Label.objects.get(pk=production.pk).revision == production.revision


def test_one_version_and_a_split_at_once_is_refused(ops_user, bundle, v1, v2_compatible, production):
    response = ops_user.post(u("adminui_move", "refunds"), split_post([("1", "90"), ("2", "10")], version="2"))
    assert field_errors(response, "version") == ["Pick one version or fill in a split, not both."]


def test_the_split_confirm_page_shows_weights_draining_sessions_and_a_verdict_per_target(
    ops_user, bundle, v1, v2_compatible, v2_renamed_too, production, session_on_v1
):
    response = ops_user.post(u("adminui_move", "refunds"), split_post([("2", "90"), ("3", "10")]))
    assert response.status_code == 200
    page = words(response)
    assert "production changes from v1 to v2 90% · v3 10%." in page
    assert (
        "v2 gets 90% of the new sessions on production and becomes live; 0 active sessions are pinned to it now."
    ) in page
    assert "v3 gets 10% of the new sessions on production and becomes live" in page
    assert "v1 starts draining: 1 active session is still pinned to it and keeps getting v1 until it ends." in page
    assert "v2 is a minor change against v1: production requires backward compatibility, and the check passes." in page
    assert "v3 is a major change against v1: production requires backward compatibility: 1 breaking change" in page
    html = response.content.decode()
    assert 'name="allow_breaking"' in html
    assert f'name="expected_revision" value="{production.revision}"' in html
    assert Label.objects.get(pk=production.pk).version_id == v1.pk  # nothing moved yet


@pytest.fixture
def v2_renamed_too(bundle, ops, v2_compatible) -> BundleVersion:
    """v3: the tool renamed, major against v1."""
    return version_publish(bundle=bundle, content=renamed_tool_content(), message="rename", actor=ops.actor).version


def test_ops_confirm_a_ramp_and_the_pages_show_the_split_with_sessions_per_target(
    ops_user, bundle, v1, v2_compatible, production, session_on_v1
):
    form = split_post([("1", "90"), ("2", "10")], confirm="yes", expected_revision=str(production.revision))
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 302
    label = Label.objects.get(pk=production.pk)
    assert [(t["number"], t["weight"]) for t in label.targets] == [(1, 90), (2, 10)]
    assert "Moved production: it now targets v1 90% · v2 10%." in text(ops_user.get(response["Location"]))
    overview = words(ops_user.get(u("adminui_bundle", "refunds")))
    assert "production (Ops only) v1 90% · v2 10% live live v1: 1 · v2: 0" in overview
    labels = words(ops_user.get(u("registry_label_changelist")))
    assert "production → v1 90% · v2 10% live live v1: 1 · v2: 0" in labels
    # Weights only: nothing starts draining, and no version joins, so nothing is judged again.
    response = ops_user.post(u("adminui_move", "refunds"), split_post([("1", "75"), ("2", "25")]))
    page = words(response)
    assert "production changes from v1 90% · v2 10% to v1 75% · v2 25%." in page
    assert "Nothing to check: no version joins production." in page
    assert "starts draining" not in page


def test_a_new_label_may_start_as_a_split_as_the_api_allows(ops_user, bundle, v1, v2_compatible, production):
    """The admin used to refuse this (a rule of its own the API lacked); it now offers what
    PUT .../labels/{label}/ with targets does: the label is created split, with one preview."""
    form = split_post([("1", "90"), ("2", "10")], label="", new_label="canary")
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 200
    page = words(response)
    assert "A new label canary is created, split as v1 90% · v2 10%." in page
    assert "Creating a label is not checked" in page
    assert 'name="expected_revision" value=""' in response.content.decode()
    response = ops_user.post(u("adminui_move", "refunds"), {**form, "confirm": "yes", "expected_revision": ""})
    assert response.status_code == 302
    canary = Label.objects.get(bundle=bundle, name="canary")
    assert [(t["number"], t["weight"]) for t in canary.targets] == [(1, 90), (2, 10)]
    assert not canary.protected and canary.compatibility == "none"
    assert "Created label canary: it targets v1 90% · v2 10%." in text(ops_user.get(response["Location"]))


def test_a_confirm_computed_from_an_older_revision_asks_again_with_the_current_state(
    ops_user, bundle, v1, v2_compatible, production, ops
):
    """Someone moved production to v2 and back between the confirm page and the click: the
    target is the same version as before, but the revision is not, so nothing is overwritten."""
    reviewed = ops_user.post(u("adminui_move", "refunds"), {"label": "production", "version": "2", "reason": "mine"})
    revision = re.search(r'name="expected_revision" value="(\d+)"', reviewed.content.decode()).group(1)
    label_move(bundle=bundle, name="production", version=v2_compatible, actor=ops.actor, reason="other")
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="other, undone")
    form = {"label": "production", "version": "2", "reason": "mine", "confirm": "yes", "expected_revision": revision}
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 200
    page = words(response)
    assert "The label moved since you reviewed it: production now targets v1 (revision 3" in page
    assert "Decide again." in page
    assert Label.objects.get(pk=production.pk).revision == 3  # not moved by the stale confirm
    fresh = re.search(r'name="expected_revision" value="(\d+)"', response.content.decode()).group(1)
    assert fresh == "3"
    form["expected_revision"] = fresh
    assert ops_user.post(u("adminui_move", "refunds"), form).status_code == 302
    assert Label.objects.get(pk=production.pk).version_id == v2_compatible.pk


def test_a_stale_split_confirm_asks_again_when_only_the_weights_changed(
    ops_user, bundle, v1, v2_compatible, production, ops
):
    label_move(bundle=bundle, name="production", targets=[(v1, 90), (v2_compatible, 10)], actor=ops.actor, reason="r")
    reviewed = ops_user.post(u("adminui_move", "refunds"), split_post([("1", "50"), ("2", "50")]))
    revision = re.search(r'name="expected_revision" value="(\d+)"', reviewed.content.decode()).group(1)
    label_move(bundle=bundle, name="production", targets=[(v1, 75), (v2_compatible, 25)], actor=ops.actor, reason="r")
    form = split_post([("1", "50"), ("2", "50")], confirm="yes", expected_revision=revision)
    response = ops_user.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 200
    assert "production now targets v1 75% · v2 25%" in words(response)
    assert [t["weight"] for t in Label.objects.get(pk=production.pk).targets] == [75, 25]


def test_a_stale_rollback_confirm_asks_again(ops_user, bundle, v1, production_on_v2, ops):
    reviewed = ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "1", "reason": "undo"})
    revision = re.search(r'name="expected_revision" value="(\d+)"', reviewed.content.decode()).group(1)
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="x")
    v2 = BundleVersion.objects.get(bundle=bundle, number=2)
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="y", allow_breaking=True)
    form = {"version": "1", "reason": "undo", "confirm": "yes", "expected_revision": revision}
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), form)
    assert response.status_code == 200
    assert "The label moved since you reviewed it: production now targets v2 (revision 4" in words(response)
    assert Label.objects.get(pk=production_on_v2.pk).version_id == v2.pk


def test_the_version_page_shows_usage(agent, reader, bundle, v1, production):
    page = words(reader.get(u("adminui_version", "refunds", 1)))
    assert "Usage 0 sessions started, 0 active; 0 pinned fetches; never used" in page
    first = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    agent.get(f"/api/v1/sessions/{first['id']}/bundle/")
    agent.get(f"/api/v1/sessions/{first['id']}/bundle/")
    page = words(reader.get(u("adminui_version", "refunds", 1)))
    assert re.search(r"Usage 1 session started, 1 active; 2 pinned fetches; first used \S+ \S+ UTC, last used", page)


def test_history_shows_the_targets_of_each_change_and_the_release(reader, ops, bundle, v1, v2, production):
    from registry.releases import ReleaseMove, release_apply

    label_move(bundle=bundle, name="production", targets=[(v1, 90), (v2, 10)], actor=ops.actor, reason="ramp")
    release = release_apply(moves=[ReleaseMove(bundle, "production", [(v2, 100)])], actor=ops.actor, reason="all in")
    response = reader.get(u("adminui_history", "refunds"))
    rows = re.findall(r'<tr data-label="production".*?</tr>', text(response), re.S)
    flat = [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]
    assert "v1 90% · v2 10% v2" in flat[0] and str(release.pk) in flat[0]
    assert "v1 v1 90% · v2 10%" in flat[1] and "ramp" in flat[1]
    assert "release" not in flat[1].lower().replace("first release", "")


def test_every_target_of_a_split_lists_the_label_on_the_versions_and_drain_pages(
    reader, ops, bundle, v1, v2, production
):
    label_move(bundle=bundle, name="production", targets=[(v1, 100), (v2, 0)], actor=ops.actor, reason="ramp at 0")
    versions = text(reader.get(u("registry_bundleversion_changelist")))
    row = re.search(r'<tr data-bundle="refunds" data-version="2">.*?</tr>', versions, re.S)
    assert "production" in row.group(0)
    drain = reader.get(u("adminui_drain_json")).json()
    by_number = {v["number"]: v for v in drain["bundles"][0]["versions"]}
    assert by_number[2]["labels"] == ["production"] and by_number[1]["labels"] == ["production"]


def test_ops_roll_back_a_ramp_from_its_split_confirm_page(ops_user, ops, bundle, v1, v2_compatible, production):
    label_move(bundle=bundle, name="production", targets=[(v1, 90), (v2_compatible, 10)], actor=ops.actor, reason="r")
    page = ops_user.get(u("adminui_rollback", "refunds", "production"))
    assert "production targets v1 90% · v2 10% now." in words(page)
    response = ops_user.post(u("adminui_rollback", "refunds", "production"), {"version": "1", "reason": "v2 is slow"})
    page = words(response)
    assert "production changes from v1 90% · v2 10% to v1." in page
    assert "v2 starts draining" in page
    revision = re.search(r'name="expected_revision" value="(\d+)"', response.content.decode()).group(1)
    form = {"version": "1", "reason": "v2 is slow", "confirm": "yes", "expected_revision": revision}
    assert ops_user.post(u("adminui_rollback", "refunds", "production"), form).status_code == 302
    label = Label.objects.get(pk=production.pk)
    assert (label.version_id, label.targets) == (v1.pk, [])
    assert BundleVersion.objects.get(pk=v2_compatible.pk).state in (VersionState.DRAINING, VersionState.DRAINED)


def test_a_confirm_to_create_a_label_that_someone_created_meanwhile_asks_again(
    engineer, ops, bundle, v1, v2_compatible, production
):
    reviewed = engineer.post(u("adminui_move", "refunds"), {"new_label": "canary", "version": "2", "reason": "try"})
    assert 'name="expected_revision" value=""' in reviewed.content.decode()
    label_move(bundle=bundle, name="canary", version=v1, actor=ops.actor, reason="someone else")
    form = {"new_label": "canary", "version": "2", "reason": "try", "confirm": "yes", "expected_revision": ""}
    response = engineer.post(u("adminui_move", "refunds"), form)
    assert response.status_code == 200
    assert "The label moved since you reviewed it: canary now targets v1 (revision 1" in words(response)
    assert "canary moves from v1 to v2" in words(response)
    assert Label.objects.get(bundle=bundle, name="canary").version_id == v1.pk


def test_the_confirm_page_shows_the_labels_required_checks(ops_user, ops, bundle, v1, v2_compatible, production):
    from registry.services import check_report, label_policy_set

    label_policy_set(
        bundle=bundle, name="production", changes={"required_checks": ["evals"]}, actor=ops.actor, reason="g"
    )
    form = {"label": "production", "version": "2", "reason": "ship"}
    page = words(ops_user.post(u("adminui_move", "refunds"), form))
    assert "Required checks v2: the move will be refused: never reported: evals" in page
    check_report(version=v2_compatible, name="evals", status="success", actor=ops.actor)
    page = words(ops_user.post(u("adminui_move", "refunds"), form))
    assert "every required check (evals) succeeded" in page
    overview = words(ops_user.get(u("adminui_bundle", "refunds")))
    assert "checks required: evals" in overview


def test_the_session_list_dates_every_time_it_shows(reader, session_on_v1):
    """'Last seen' showed a bare time of day: a session last seen yesterday looked current."""
    import re

    row = re.search(
        r'<td data-th="Last seen">([^<]*)</td>', reader.get(u("sessions_app_session_changelist")).content.decode()
    )
    assert row and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row.group(1)), row
