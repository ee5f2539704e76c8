"""The admin's authoring workbench on real PostgreSQL (issue 23): nothing a version holds is
dropped by the editor, a removed skill is a change the diff and the contract check report."""

import copy
import json

import pytest

from adminui.forms import CARRIED_FIELDS
from registry import includes
from registry.canonical import CONTENT_FIELDS
from registry.contracts import diff_contents
from registry.models import BundleVersion
from tests.adminui.test_adminui_views import client_for, make_user, u, words
from tests.conftest import content

SKILLS = [
    {
        "name": "refund_order",
        "summary": "Use when the customer wants money back",
        "description": "Refund an order that was paid; not for exchanges.",
        "keywords": ["refund", "money back", "return"],
        "category": "billing",
        "examples": ["I want my money back", "refund my order"],
        "level": "L2",
        "exclusive_group": "money",
        "triggers": ["\\brefund\\b"],
    },
    {
        "name": "greet_customer",
        "summary": "Use when a conversation starts",
        "description": "Say hello and ask what the customer needs.",
        "keywords": ["hello", "greeting", "start"],
        "category": "general",
        "examples": ["hi there", "good morning"],
        "level": "L1",
    },
]


def full_content() -> dict:
    """A document with every content field set (the test fails when a field is added to the
    schema and not here, so the round trip below always covers all of them)."""
    doc = content(
        "Line one.\nYou are a refund agent. Call `process_refund` after checking the order.\nLine three.",
        guardrails={"default": "allow", "rules": [{"tool": "process_refund", "effect": "confirm", "reason": "money"}]},
        output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        metadata={"team": "billing", "ünïcode": "ça va", "n": 1.5},
        variables={"customer": {"type": "string", "scope": "session", "default": "friend"}},
        knowledge=["ops"],
        skills=copy.deepcopy(SKILLS),
        compaction={"keep_tool_results": 3, "max_tool_result_chars": 2000, "placeholder": "[cut]"},
        # A declared tool that `tools` already holds is kept as pinned: no server is reached.
        mcp_servers=[{"name": "orders", "url": "https://mcp.example.com/mcp", "tools": ["process_refund"]}],
    )
    doc["system_prompt"] += "\nHello {{customer}}."
    # The resolved includes are written by publishing a marker, not by an author; their round trip
    # through the editor is tests/registry/test_composition.py's.
    assert set(doc) | includes.FIELDS == CONTENT_FIELDS, "full_content() must set every content field"
    return doc


@pytest.fixture
def engineer_client(db):
    from adminui.groups import PROMPT_ENGINEERS

    return client_for(make_user("pat", PROMPT_ENGINEERS))


@pytest.mark.parametrize("boxless", [(), ("compaction", "skills")], ids=["all-in-boxes", "some-without-a-box"])
def test_the_editor_round_trips_every_content_field(engineer_client, bundle, ops, boxless, monkeypatch):
    """Every field either has a box or is carried (the set comes from the content schema);
    "some-without-a-box" stands for a field added to the schema later, before the form has a box."""
    from adminui import forms as adminui_forms

    # The resolved includes are neither: the form edits the source, which publishing resolves again.
    assert set(adminui_forms.JSON_FIELDS) | set(CARRIED_FIELDS) | {"system_prompt"} | includes.FIELDS == CONTENT_FIELDS
    if boxless:
        monkeypatch.setattr(
            adminui_forms, "JSON_FIELDS", tuple(f for f in adminui_forms.JSON_FIELDS if f not in boxless)
        )
        monkeypatch.setattr(adminui_forms, "CARRIED_FIELDS", boxless)
    response = ops.post(f"/api/v1/bundles/{bundle.name}/versions/", {"content": full_content(), "message": "all"})
    assert response.status_code == 201, response.content
    source = BundleVersion.objects.get(bundle=bundle, number=response.json()["number"])

    page = engineer_client.get(u("adminui_version_new", bundle.name, query=f"from={source.number}"))
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields}
    if boxless:
        assert "Carried unchanged from v1 (this form has no box for them): compaction, skills." in words(page)
        data = {k: v for k, v in data.items() if k not in boxless}
    else:
        assert "Carried unchanged" not in words(page)
    # The one-line prompt change a person makes, everything else as the form shows it.
    data["system_prompt"] = data["system_prompt"].replace("Line three.", "Line 3.")
    data["message"] = "one line"
    saved = engineer_client.post(u("adminui_version_new", bundle.name), data)
    assert saved.status_code == 302, words(saved)

    old = json.loads(bytes(source.canonical))
    new = json.loads(bytes(BundleVersion.objects.get(bundle=bundle, number=source.number + 1).canonical))
    assert set(new) == set(old)
    for name in sorted(CONTENT_FIELDS - {"system_prompt", *includes.FIELDS}):
        assert json.dumps(new[name], sort_keys=True) == json.dumps(old[name], sort_keys=True), name
    assert new["system_prompt"] == old["system_prompt"].replace("Line three.", "Line 3.")


def test_a_damaged_carried_field_is_refused_and_cannot_override_the_prompt(engineer_client, bundle, v1, monkeypatch):
    from adminui import forms as adminui_forms

    monkeypatch.setattr(adminui_forms, "JSON_FIELDS", tuple(f for f in adminui_forms.JSON_FIELDS if f != "compaction"))
    monkeypatch.setattr(adminui_forms, "CARRIED_FIELDS", ("compaction",))
    page = engineer_client.get(u("adminui_version_new", bundle.name))
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"message": "m"}
    refused = engineer_client.post(u("adminui_version_new", bundle.name), data | {"carried": "[1]"})
    assert refused.status_code == 200 and "damaged" in words(refused)
    forged = json.dumps({"system_prompt": "forged", "compaction": {"keep_tool_results": 1}})
    saved = engineer_client.post(u("adminui_version_new", bundle.name), data | {"carried": forged})
    assert saved.status_code == 302
    doc = json.loads(bytes(BundleVersion.objects.get(bundle=bundle, number=2).canonical))
    assert doc["system_prompt"] == json.loads(bytes(v1.canonical))["system_prompt"]
    assert doc["compaction"] == {"keep_tool_results": 1}


def test_a_removed_skill_is_a_breaking_change_and_an_edited_one_a_patch():
    old = full_content()
    removed = full_content() | {"skills": SKILLS[1:]}
    diff = diff_contents(old, removed)
    assert [(c.kind, c.level, c.path) for c in diff.changes] == [("skill_removed", "major", "skills[refund_order]")]
    assert diff.level == "major"
    edited = full_content()
    edited["skills"][1] = edited["skills"][1] | {"summary": "Use when someone says hello"}
    assert [(c.kind, c.level) for c in diff_contents(old, edited).changes] == [("skill_changed", "patch")]
    assert diff_contents(removed, old).level == "minor"  # added back
    policy = full_content() | {"compaction": {"keep_tool_results": 1}}
    assert [c.kind for c in diff_contents(old, policy).changes] == ["compaction_changed"]


def test_the_diff_page_shows_a_removed_skill(engineer_client, bundle, ops):
    for doc, message in ((full_content(), "with"), (full_content() | {"skills": SKILLS[1:]}, "without")):
        assert (
            ops.post(f"/api/v1/bundles/{bundle.name}/versions/", {"content": doc, "message": message}).status_code
            == 201
        )
    page = engineer_client.get(u("adminui_diff", bundle.name, query="old=1&new=2"))
    assert page.status_code == 200
    assert "Skill `refund_order` was removed" in words(page) and "major" in words(page)
    assert "skills" in page.context["diff"].fields


def test_check_against_the_source_gives_the_verdict_without_publishing(engineer_client, bundle, v1, production):
    from knowledge.render import build_prefix

    page = engineer_client.get(u("adminui_version_new", bundle.name))
    assert 'value="Check against v1"' in page.content.decode()
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"message": ""}
    data["tools"] = "[]"  # the tool is gone: major against v1
    data["system_prompt"] = "You are a refund agent."
    checked = engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check against v1"})
    assert checked.status_code == 200
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1  # nothing published
    said = words(checked)
    assert "Check against v1: nothing was saved" in said
    assert "Contract check against v1: major change" in said and "Tool `process_refund` was removed" in said
    verdict = checked.context["verdict"]
    assert [(lv.name, lv.level, lv.refused) for lv in verdict.labels] == [("production", "major", True)]
    assert "refused without allow_breaking" in said
    expected = build_prefix({"system_prompt": "You are a refund agent.", "tools": []}, {}, {})
    assert verdict.prefix_bytes == len(expected.body)
    assert f"Rendered prefix: {len(expected.body)} bytes" in said
    assert not checked.context["form"].errors  # no change message needed to check


def test_the_checks_verdict_is_at_the_top_of_the_form_and_links_each_problem_to_its_box(engineer_client, bundle, v1):
    page = engineer_client.get(u("adminui_version_new", bundle.name))
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"message": ""}
    data["guardrails"] = json.dumps({"rules": [{"tool": "no_such_tool", "effect": "deny"}]})
    checked = engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check against v1"})
    assert checked.status_code == 200
    html = checked.content.decode()
    # Issue 35: after the reload the author is at the top of the page: the verdict is there, above
    # the first box, not below the 4,000 px of fields.
    assert html.index('id="verdict"') < html.index('id="row-system_prompt"')
    errors = html.split('id="verdict-errors"')[1].split("</ul>")[0]
    assert '<a href="#id_guardrails"><code>' in errors and "no_such_tool" in errors
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_check_shows_content_errors_without_publishing(engineer_client, bundle, v1):
    page = engineer_client.get(u("adminui_version_new", bundle.name))
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"message": "", "tools": "[1"}
    checked = engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check"})
    assert checked.status_code == 200 and "not valid JSON" in words(checked)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def _sessions(bundle, agent, label, n):
    for _ in range(n):
        assert agent.post("/api/v1/sessions/", {"bundle": bundle.name, "label": label}).status_code == 201


def test_pages_count_sessions_per_label_target_and_a_revoked_version_shows_none(
    engineer_client, bundle, v1, production, agent, ops
):
    import re

    from registry.lifecycle import version_revoke
    from registry.services import label_move, version_publish

    label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="r")
    _sessions(bundle, agent, "production", 2)
    _sessions(bundle, agent, "staging", 1)
    for page in (u("adminui_bundle", bundle.name), "/admin/"):
        html = engineer_client.get(page).content.decode()
        rows = dict(re.findall(r'<tr data-label="(\w+)">(.*?)</tr>', html, re.S))
        count = lambda row: re.search(r'class="target-sessions">(.*?)</span>', row, re.S).group(1)  # noqa: E731
        assert re.search(r">2</a>$", count(rows["production"])), page
        assert re.search(r">1</a>$", count(rows["staging"])), page
    v2 = version_publish(bundle=bundle, content=content("Other."), message="v2", actor=ops.actor).version
    for name in ("production", "staging"):
        label_move(bundle=bundle, name=name, version=v2, actor=ops.actor, reason="r", allow_breaking=True)
    version_revoke(version=BundleVersion.objects.get(pk=v1.pk), reason="bad", actor=ops.actor)  # noqa
    overview = engineer_client.get(u("adminui_bundle", bundle.name)).content.decode()
    row = re.search(r'<tr data-version="1">(.*?)</tr>', overview, re.S).group(1)
    assert '<td data-th="Active sessions">0</td>' in row
    assert "0 sessions active" in words(engineer_client.get(u("adminui_version", bundle.name, 1))) or (
        "0 active" in words(engineer_client.get(u("adminui_version", bundle.name, 1)))
    )


def test_the_home_page_is_the_ops_dashboard(engineer_client, bundle, v1, production, agent, ops):
    from registry.services import label_move, version_publish
    from webhooks.models import Delivery, Endpoint

    _sessions(bundle, agent, "production", 1)
    v2 = version_publish(bundle=bundle, content=content("Second."), message="v2", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=v2, actor=ops.actor, reason="ship v2", allow_breaking=True)
    hook = Endpoint.objects.create(url="https://hooks.example/x", events=["label.moved"], created_by="t")
    Delivery.objects.create(endpoint=hook, event="label.moved", message_id="m1", payload={}, attempts=2)
    home = engineer_client.get("/admin/")
    said = words(home)
    assert home.templates[0].name == "adminui/home.html"
    assert "Draining: v1 since" in said and "1 active" in said
    assert "ship v2" in said  # the reason of the last change, with who made it
    assert "https://hooks.example/x: 1 delivery retrying" in said
    assert "Site administration" not in said and "Recent actions" not in said


def test_custom_pages_have_no_model_sidebar_and_the_top_navigation_lists_knowledge_packs(engineer_client, bundle, v1):
    for page in ("/admin/", u("adminui_bundle", bundle.name), u("adminui_version", bundle.name, 1)):
        html = engineer_client.get(page).content.decode()
        assert 'id="nav-sidebar"' not in html, page
        assert ">Knowledge packs</a>" in html.split('aria-label="Main pages"')[1].split("</nav>")[0], page


def test_stock_pages_have_no_model_sidebar_and_the_top_navigation_reaches_every_page_it_listed(
    engineer_client, db, bundle, v1
):
    from django.contrib.auth.models import User

    root = client_for(User.objects.create_superuser("root", "r@example.com", "pw"))
    listed = [m["admin_url"] for app in root.get("/admin/").context["available_apps"] for m in app["models"]]
    assert u("access_apikey_changelist") in listed and u("auth_user_changelist") in listed
    for page in (u("access_apikey_changelist"), u("audit_auditevent_changelist"), u("auth_user_changelist")):
        html = root.get(page).content.decode()
        assert 'id="nav-sidebar"' not in html, page
        nav = html.split('aria-label="Main pages"')[1].split("</nav>")[0]
        assert [url for url in listed if f'href="{url}"' not in nav] == [], page
        assert nav.count(f'href="{u("registry_bundle_changelist")}"') == 1, page  # main pages once
    # API keys are for superusers only: a prompt engineer's navigation does not offer them.
    nav = engineer_client.get("/admin/").content.decode().split('aria-label="Main pages"')[1].split("</nav>")[0]
    assert u("access_apikey_changelist") not in nav and u("registry_bundle_changelist") in nav


def test_dates_are_iso_with_the_time_zone_on_custom_and_stock_pages(db, bundle, v1, production):
    import re

    from django.contrib.auth.models import User

    root = client_for(User.objects.create_superuser("root", "r@example.com", "pw"))
    iso = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
    for page in (
        u("adminui_bundle", bundle.name),
        u("audit_auditevent_changelist"),
        u("adminui_version", bundle.name, 1),
    ):
        said = words(root.get(page))
        assert iso.search(said), page
        assert not re.search(r"\b(a\.m\.|p\.m\.)", said), page


def test_label_creation_suggests_the_usual_names(engineer_client, db, bundle, v1):
    from adminui.groups import OPS

    ops_client = client_for(make_user("olga", OPS))
    offered = lambda client: [  # noqa: E731
        value for value, _ in client.get(u("adminui_move", bundle.name)).context["form"].fields["label"].widget.choices
    ]
    assert offered(ops_client)[1:] == ["production", "staging"]
    assert offered(engineer_client)[1:] == ["staging"]  # production is created protected: Ops only
    page = ops_client.get(u("adminui_move", bundle.name, query="label=production"))
    assert page.status_code == 200


def test_the_user_form_shows_roles_not_staff_flags_or_raw_permissions(db):
    from django.apps import apps
    from django.contrib.auth.models import User

    from adminui.groups import groups_sync

    groups_sync(apps=apps)  # earlier transactional tests (tests/turns first) flush the migration's groups
    root = client_for(User.objects.create_superuser("root", "r@example.com", "pw"))
    add = words(root.get(u("auth_user_add")))
    assert "Roles" in add and "Prompt engineers" in add and "Ops" in add
    assert "Staff status" not in add and "User permissions" not in add
    mate = make_user("sam")
    change = root.get(u("auth_user_change", mate.pk)).content.decode()
    assert 'name="groups"' in change and 'type="checkbox"' in change
    assert 'name="user_permissions"' not in change
    created = root.post(
        u("auth_user_add"),
        {
            "username": "newbie",
            "password1": "a long pw 12345",
            "password2": "a long pw 12345",
            "groups": [__import__("django.contrib.auth.models", fromlist=["Group"]).Group.objects.get(name="Ops").pk],
        },
    )
    assert created.status_code == 302, words(created)
    assert list(User.objects.get(username="newbie").groups.values_list("name", flat=True)) == ["Ops"]


def test_skills_and_compaction_have_boxes_and_check_previews_the_routing(engineer_client, bundle, ops):
    assert (
        ops.post(f"/api/v1/bundles/{bundle.name}/versions/", {"content": full_content(), "message": "m"}).status_code
        == 201
    )
    page = engineer_client.get(u("adminui_version_new", bundle.name))
    form = page.context["form"]
    assert json.loads(form["skills"].value()) == SKILLS and "Use when" in words(page)  # the rules beside the box
    assert json.loads(form["compaction"].value())["placeholder"] == "[cut]"
    data = {name: form[name].value() or "" for name in form.fields} | {"route_message": "I want a refund please"}
    checked = engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check"})
    said = words(checked)
    assert "these cards would load: always (L1): greet_customer; routed (L2): refund_order" in said, said
    data["skills"] = ""  # emptied: the version has no skills, and the check says what that breaks
    checked = engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check"})
    assert "Skill `refund_order` was removed" in words(checked)
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_a_big_versions_check_routes_by_keywords_and_asks_the_worker_not_building_in_the_request(
    engineer_client, bundle, ops, settings
):
    """Issue 36: the check's routing preview goes through skills.index_store as the turn call
    does: a big version's index is not built in the admin's request; the page says so."""
    from skills import index_store, router
    from skills.services import route_embedder
    from tests.live import purge_queues

    settings.SKILL_INDEX_INLINE_COST = 10  # these cards count as a big version
    redis = index_store._client()
    published = ops.post(f"/api/v1/bundles/{bundle.name}/versions/", {"content": full_content(), "message": "m"})
    assert published.status_code == 201
    content_hash = published.json()["content_hash"]
    for key in redis.scan_iter("registry:skillindex:*"):
        redis.delete(key)  # whatever the publish asked for: the check finds nothing
    router._INDEXES = None  # nor does this process hold it
    form = engineer_client.get(u("adminui_version_new", bundle.name)).context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"route_message": "I want a refund please"}
    try:
        said = words(engineer_client.post(u("adminui_version_new", bundle.name), data | {"check": "Check"}))
        assert "routed (L2): refund_order" in said, said
        assert "Routed by keywords alone" in said, said
        assert router.index_loaded(content_hash, route_embedder(), lambda: None) is None  # not built here
        assert redis.get(f"registry:skillindex:building:{content_hash}") is not None  # the worker was asked
    finally:
        for key in redis.scan_iter("registry:skillindex:*"):
            redis.delete(key)
        router._INDEXES = None
        purge_queues()


def test_the_version_page_shows_tools_as_cards_with_a_parameter_table_and_the_json_a_click_away(
    engineer_client, bundle, v1
):
    import re

    html = engineer_client.get(u("adminui_version", bundle.name, 1)).content.decode()
    card = re.search(
        r'<section class="adminui-tool-card" data-tool="process_refund">(.*?)</section>', html, re.S
    ).group(1)
    rows = re.findall(
        r'<tr><td data-th="Parameter"><code>(\w+)</code></td>'
        r'<td data-th="Type">(\w+)</td><td data-th="Required">(\w+)</td>',
        card,
    )
    # Canonical bytes sort keys: the stored version no longer knows the order the author typed.
    assert rows == [("amount", "number", "optional"), ("order_id", "string", "required")]
    assert "Refund an order." in card
    assert re.search(r'<details class="adminui-json">\s*<summary><h2>Tools as JSON</h2></summary>', html)
    assert re.search(r'<details class="adminui-json" open>\s*<summary><h2>Output schema</h2>', html)


def test_the_form_explains_the_guardrails_and_output_schema_formats(engineer_client, bundle, v1):
    said = words(engineer_client.get(u("adminui_version_new", bundle.name)))
    assert '{"default": "allow" | "confirm" | "deny", "rules": [{"tool": "name"' in said
    assert "JSON Schema (Draft 2020-12)" in said


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini"])
def test_the_version_page_shows_the_provider_request_the_turn_call_sends(engineer_client, monkeypatch, fmt):
    """The page's body for a format and variables is the turn call's `request` for a new session
    started with the same variables, sent the same message (skills routed, tail, cards and all)."""
    import html as html_lib
    import re
    from types import SimpleNamespace

    from tests.turns.test_turn import World
    from turns import preview

    world = World(monkeypatch)  # bundle "support" v1: skills, knowledge, session and turn variables
    monkeypatch.setattr(preview, "timezone", SimpleNamespace(now=lambda: world.clock.now))
    message = "I want a refund for my order"
    turn = world.turn(
        {"messages": [{"role": "user", "content": message}], "variables": {"ticket": "T-7"}, "format": fmt}
    )
    page = engineer_client.get(
        u("adminui_version", "support", 1),
        {
            "format": fmt,
            "variables": json.dumps({"timezone": "Europe/Paris"}),  # as World.start started the session
            "turn_variables": json.dumps({"ticket": "T-7"}),
            "message": message,
        },
    )
    assert page.status_code == 200
    text = page.content.decode()
    shown = html_lib.unescape(re.search(r'<pre[^>]*id="provider-body">(.*?)</pre>', text, re.S).group(1))
    assert json.loads(shown) == turn["request"]
    assert list(json.loads(shown)) == list(turn["request"])  # the keys in the order sent
    assert "T-7" in shown and "Skills for this turn:" in shown
    curl = html_lib.unescape(re.search(r'<pre[^>]*id="provider-curl">(.*?)</pre>', text, re.S).group(1))
    assert curl.startswith("curl -sS ") and curl.rstrip().endswith("\nJSON")
    assert json.loads(curl.split("<<'JSON'\n", 1)[1].rsplit("\nJSON", 1)[0]) == turn["request"]


def test_the_provider_request_refuses_what_the_turn_call_refuses(engineer_client, monkeypatch):
    from tests.turns.test_turn import World

    World(monkeypatch)
    url = u("adminui_version", "support", 1)
    said = words(engineer_client.get(url, {"format": "anthropic", "turn_variables": json.dumps({"nope": 1})}))
    assert "nope" in said and "provider-body" not in engineer_client.get(url, {"format": "nope"}).content.decode()
    long = engineer_client.get(url, {"format": "gemini", "message": "x" * 20_001})
    assert "At most 20000 characters" in words(long)
    huge = engineer_client.get(url, {"format": "gemini", "turn_variables": "[" * 70_000})
    assert huge.status_code == 200 and "At most 65536 characters" in words(huge)
