"""The admin's playground (Django's test client; tests/test_adminui_browser.py drives Chromium
where it is installed): a conversation on a version or a draft, each turn composed by
adminui.workbench.compose_turn and, with a provider in EVAL_PROVIDERS, answered by the model
through the provider's SDK (the provider stand-in here), its figures shown and its cost counted
against the day's budget."""

import html
import json
import re

import pytest

from adminui.groups import OPS, PROMPT_ENGINEERS
from devtools.provider_standin import Call, Reply, StandIn
from evals import endpoints
from evals.models import ProviderSpend
from registry.models import BundleVersion
from registry.services import version_publish
from tests.adminui.test_adminui_views import client_for, make_user, u, version_post, words
from tests.conftest import content

pytestmark = pytest.mark.django_db

MODEL = "claude-haiku-4-5"  # priced in the shipped model catalog


@pytest.fixture
def engineer(db):
    return client_for(make_user("pat", PROMPT_ENGINEERS))


@pytest.fixture
def priced(bundle, ops):
    doc = content("You are a refund agent for {{shop}}.", model={"name": MODEL, "max_tokens": 256})
    doc["variables"] = {"shop": {"type": "string", "scope": "session", "default": "Acme"}}
    return version_publish(bundle=bundle, content=doc, message="priced", actor=ops.actor).version


def script(fmt: str, body: dict, n: int) -> Reply:
    if "1042" in json.dumps(body["messages"][-1]):
        return Reply(calls=[Call("process_refund", {"order_id": "1042"})])
    return Reply(text=f"Answer {n}: what is your order number?")


@pytest.fixture
def provider(settings, monkeypatch):
    with StandIn(script=script) as server:
        monkeypatch.setenv("PLAYGROUND_KEY", "secret-of-the-stand-in")
        value = [{"name": "standin", "format": "anthropic", "base_url": server.url, "key_env": "PLAYGROUND_KEY"}]
        settings.EVAL_PROVIDERS = endpoints.parse(json.dumps(value))
        yield server


def body_of(response) -> dict:
    found = re.search(r'<pre[^>]*id="playground-body">(.*?)</pre>', response.content.decode(), re.S)
    assert found, words(response)[-2000:]
    return json.loads(html.unescape(found.group(1)))


def text_of(message: dict) -> str:
    said = message["content"]
    return said if isinstance(said, str) else "".join(b.get("text", "") for b in said)


def send(client, subject, message, **extra):
    data = {"subject": str(subject), "format": "anthropic", "variables": "{}", "turn_variables": "{}"}
    return client.post(u("adminui_playground", "refunds"), {**data, "message": message, **extra})


def test_without_a_provider_it_composes_the_turn_says_how_to_configure_one_and_goes_on(engineer, settings, v1):
    settings.EVAL_PROVIDERS = {}
    page = engineer.get(u("adminui_playground", "refunds"))
    assert page.status_code == 200 and "EVAL_PROVIDERS" in words(page)
    first = send(engineer, 1, "I want a refund", assistant="What is your order number?")
    assert first.status_code == 200
    assert text_of(body_of(first)["messages"][0]).startswith("I want a refund")
    assert "You are a refund agent" in json.dumps(body_of(first)["system"])
    second = send(engineer, 1, "Order 1042")
    said = [(m["role"], text_of(m)) for m in body_of(second)["messages"]]
    assert said[:2] == [("user", "I want a refund"), ("assistant", "What is your order number?")]
    assert said[2][0] == "user" and said[2][1].startswith("Order 1042")
    assert "curl -sS" in second.content.decode()
    assert engineer.post(u("adminui_playground", "refunds"), {"subject": "1", "reset": "1"}).status_code == 302
    assert "Nothing yet" in words(engineer.get(u("adminui_playground", "refunds")))


def test_with_a_provider_the_model_answers_with_tokens_cost_and_latency_over_several_turns(engineer, provider, priced):
    first = send(engineer, priced.number, "I want a refund")
    assert first.status_code == 200, words(first)[-800:]
    text = words(first)
    assert "Answer 0: what is your order number?" in text
    figures = r"standin · claude-haiku-4-5 ·"
    figures += r" \d+ input tokens \(\d+ cached\) · \d+ output tokens · 0\.\d{6} USD · \d+ ms"
    assert re.search(figures, text)
    # What the model got is the request the page shows: the one composition.
    assert provider.received[0].body == body_of(first) and provider.refused == []
    assert "Acme" in json.dumps(provider.received[0].body["system"])  # the session variable's default
    second = send(engineer, priced.number, "Refund order 1042 please")
    assert "Tool call: process_refund" in words(second)
    sent = provider.received[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert text_of(sent[1]) == "Answer 0: what is your order number?"
    spend = ProviderSpend.objects.get(provider="standin")
    assert spend.calls == 2 and spend.spent_usd > 0
    assert "secret-of-the-stand-in" not in first.content.decode()


def test_a_draft_from_the_new_version_form_is_tried_without_publishing(engineer, provider, priced):
    before = BundleVersion.objects.count()
    data = version_post(system_prompt="Draft prompt: be brief.", model=json.dumps({"name": MODEL}), message="")
    response = engineer.post(u("adminui_version_new", "refunds"), {**data, "try": "1"})
    assert response.status_code == 302 and response["Location"] == u("adminui_playground", "refunds")
    page = engineer.get(response["Location"])
    assert "the draft from the new-version form" in words(page)
    answer = send(engineer, "draft", "hello")
    assert "Draft prompt: be brief." in json.dumps(provider.received[-1].body["system"])
    assert "Answer 0" in words(answer)
    assert BundleVersion.objects.count() == before  # nothing published


def test_refusals_are_shown_and_nothing_is_sent(engineer, provider, priced, v1, settings, db):
    unpriced = send(engineer, v1.number, "hello", provider="standin")
    assert unpriced.status_code == 400 and "no price for m-1" in words(unpriced)
    bad = send(engineer, priced.number, "hello", variables='{"nope": 1}')
    assert bad.status_code == 400 and "nope" in words(bad)
    settings.EVAL_DAILY_BUDGET_USD = 0
    spent = send(engineer, priced.number, "hello")
    assert spent.status_code == 409 and "EVAL_DAILY_BUDGET_USD" in words(spent)
    assert provider.received == []
    settings.EVAL_DAILY_BUDGET_USD = 5
    shown = send(engineer, priced.number, "hello", provider="")  # the request only: nothing sent
    assert shown.status_code == 200 and body_of(shown)["model"] == MODEL and provider.received == []
    assert send(client_for(make_user("olga", OPS)), priced.number, "hi").status_code == 200


def test_a_conversation_is_saved_as_a_suite_case_in_one_click(engineer, provider, priced, ops):
    ops.post("/api/v1/suites/", {"name": "refund-evals"})
    first = {"id": "old", "input": {"messages": [{"role": "user", "content": "hi"}]},
             "expect": [{"type": "contains", "value": "hello"}]}  # fmt: skip
    ops.post("/api/v1/suites/refund-evals/versions/", {"content": {"items": [first]}, "message": "m"})
    send(engineer, priced.number, "I want a refund")
    page = send(engineer, priced.number, "It is order 77")
    assert 'id="save-case"' in page.content.decode()
    form = {"subject": str(priced.number), "variables": '{"shop": "Bolt"}', "suite": "refund-evals", "save": "1"}
    saved = engineer.post(
        u("adminui_playground", "refunds"),
        {**form, "case": "order-77", "scorer": "contains", "value": "refund"},
        follow=True,
    )
    assert "Saved the conversation as case order-77 of refund-evals v2" in words(saved)
    from evals.models import SuiteVersion

    doc = json.loads(bytes(SuiteVersion.objects.get(suite__name="refund-evals", number=2).canonical))
    assert [i["id"] for i in doc["items"]] == ["old", "order-77"]
    case = doc["items"][1]
    assert [m["role"] for m in case["input"]["messages"]] == ["user", "assistant", "user"]
    assert case["input"]["messages"][1]["content"] == "Answer 0: what is your order number?"
    assert case["input"]["messages"][2]["content"] == "It is order 77"
    assert case["input"]["variables"] == {"shop": "Bolt"}
    assert case["expect"] == [{"type": "contains", "value": "refund"}] and case["tags"] == ["playground"]
    bad = {**form, "case": "bad id!", "scorer": "regex", "value": "(?=x)"}
    refused = engineer.post(u("adminui_playground", "refunds"), bad, follow=True)
    assert "Not saved" in words(refused) and "items[2]" in words(refused)
    assert SuiteVersion.objects.filter(suite__name="refund-evals").count() == 2


def test_the_same_message_runs_on_two_versions_side_by_side(engineer, provider, priced, bundle, ops):
    other = version_publish(
        bundle=bundle, content=content("Version two, terse.", model={"name": MODEL}), message="v", actor=ops.actor
    ).version
    page = send(engineer, priced.number, "I want a refund", beside=str(other.number))
    assert page.status_code == 200, words(page)[-800:]
    assert len(provider.received) == 2 and provider.refused == []
    assert "refund agent for Acme" in json.dumps(provider.received[0].body["system"])
    assert "Version two, terse." in json.dumps(provider.received[1].body["system"])
    said = words(page)
    assert f"Beside, on v{other.number}: Answer 1: what is your order number?" in said
    assert said.count("input tokens") == 2
    # The conversation goes on with the first version's answer.
    send(engineer, priced.number, "Order 9")
    assert text_of(provider.received[2].body["messages"][1]) == "Answer 0: what is your order number?"


def test_each_model_call_is_audited_without_the_key_or_the_conversation(engineer, provider, priced, settings):
    from audit.models import AuditEvent

    value = [
        {"name": "standin", "format": "anthropic", "base_url": provider.url, "key_env": "PLAYGROUND_KEY"},
        {"name": "nowhere", "format": "anthropic", "base_url": "http://127.0.0.1:9", "key_env": "PLAYGROUND_KEY"},
    ]
    settings.EVAL_PROVIDERS = endpoints.parse(json.dumps(value))
    send(engineer, priced.number, "I want a refund, says Quentin", provider="standin")
    data = version_post(system_prompt="Draft prompt: be brief.", model=json.dumps({"name": MODEL}), message="")
    engineer.post(u("adminui_version_new", "refunds"), {**data, "try": "1"})
    send(engineer, "draft", "hello from the draft", provider="standin")
    failed = send(engineer, priced.number, "anyone there?", provider="nowhere")
    assert "APIConnectionError" in words(failed)
    send(engineer, priced.number, "only composed", provider="")  # no model call: nothing audited

    events = list(AuditEvent.objects.filter(action="playground.called").order_by("id"))
    assert [(e.actor, e.target_type, e.target) for e in events] == [
        ("user:pat", "version", f"refunds@{priced.number}"),
        ("user:pat", "draft", "refunds"),
        ("user:pat", "version", f"refunds@{priced.number}"),
    ]
    answered, drafted, unreached = (e.data for e in events)
    usage = provider.received[0].usage
    assert answered["content_hash"] == priced.content_hash
    assert (answered["provider"], answered["model"], answered["format"]) == ("standin", MODEL, "anthropic")
    assert answered["input_tokens"] == usage["input"] > 0 and answered["cached_tokens"] == usage["read"]
    assert answered["output_tokens"] == len("Answer 0: what is your order number?") // 4
    assert answered["cost_usd"] > 0 and "error" not in answered
    assert drafted["content_hash"] not in (priced.content_hash, "") and drafted["cost_usd"] > 0
    assert unreached["provider"] == "nowhere" and unreached["error"] == "APIConnectionError"
    assert (unreached["input_tokens"], unreached["cost_usd"]) == (0, 0)
    stored = json.dumps([[e.actor, e.target, e.reason, e.data] for e in events])
    for secret in ("secret-of-the-stand-in", "Quentin", "hello from the draft", "refund agent", "Draft prompt"):
        assert secret not in stored
    assert ProviderSpend.objects.get(provider="standin").calls == 2  # the failed call cost nothing


def test_each_turn_routes_on_the_earlier_turns_as_a_session_does(engineer, provider, bundle, ops):
    from tests.skills.test_skills import SKILLS

    doc = content("Skilled.", model={"name": MODEL, "max_tokens": 256}, skills=SKILLS)
    skilled = version_publish(bundle=bundle, content=doc, message="skills", actor=ops.actor).version

    def routed(page) -> str:
        found = re.search(r'<p class="quiet" id="playground-route">(.*?)</p>', page.content.decode(), re.S)
        return html.unescape(found.group(1)) if found else ""

    first = send(engineer, skilled.number, "where is my parcel")
    assert "Turn 1 of the session" in routed(first) and "track_parcel" in routed(first)
    assert "track_parcel" in json.dumps(provider.received[0].body)
    second = send(engineer, skilled.number, "it is the parcel from last week")
    assert "Turn 2 of the session" in routed(second) and "track_parcel" in routed(second)
    # Loaded in both earlier turns and called in neither (the model only answered in words):
    # the ghost rule leaves it out of turn 3, as the turn call would on a session.
    third = send(engineer, skilled.number, "ok, when will it come?")
    assert provider.refused == [] and len(provider.received) == 3
    assert "Turn 3 of the session" in routed(third)
    assert "left out, loaded in the last two turns and called in neither: track_parcel" in routed(third)
    assert "track_parcel" not in json.dumps(provider.received[2].body)
    # A new conversation is a new session: the first turn routes it again.
    engineer.post(u("adminui_playground", "refunds"), {"subject": str(skilled.number), "reset": "1"})
    again = send(engineer, skilled.number, "ok, when will it come? the parcel")
    assert "Turn 1 of the session" in routed(again) and "track_parcel" in json.dumps(provider.received[3].body)
