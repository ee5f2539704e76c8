"""The playground in Chromium (tests/adminui/test_adminui_browser.py's fixtures: skipped, saying
why, without /usr/bin/chromium), at 1280 and 390 px: a conversation answered by the provider
stand-in named in EVAL_PROVIDERS, its reply, tokens and cost shown, a second version's answer
beside it, and the conversation saved as a suite case; the page never scrolls sideways."""

import json

import pytest
from playwright.sync_api import Browser, expect

from adminui.groups import PROMPT_ENGINEERS
from devtools.provider_standin import Reply, StandIn
from evals import endpoints
from evals.models import SuiteVersion
from evals.services import suite_create, suite_version_publish
from registry.models import Bundle
from registry.services import version_publish
from tests.adminui.test_adminui_browser import (  # noqa: F401 (fixtures)
    SIDEWAYS,
    SYSTEM,
    Shots,
    base_url,
    browser,
    log_in,
    person,
    refunds,
    shot,
)
from tests.conftest import content

MODEL = "claude-haiku-4-5"  # priced in the shipped model catalog


@pytest.fixture
def provider(settings, monkeypatch):
    def script(fmt: str, body: dict, n: int) -> Reply:
        terse = "Version three" in json.dumps(body.get("system"))
        return Reply(text="Refund noted." if terse else f"Answer {n}: what is your order number?")

    with StandIn(script=script) as server:
        monkeypatch.setenv("PLAYGROUND_KEY", "stand-in-key")
        value = [{"name": "standin", "format": "anthropic", "base_url": server.url, "key_env": "PLAYGROUND_KEY"}]
        settings.EVAL_PROVIDERS = endpoints.parse(json.dumps(value))
        yield server


@pytest.mark.parametrize("width", [1280, 390])
def test_the_playground_answers_side_by_side_and_saves_a_case(
    browser: Browser,  # noqa: F811
    base_url: str,  # noqa: F811
    refunds: Bundle,  # noqa: F811
    shot: Shots,  # noqa: F811
    provider,
    width: int,
):
    for prompt in ("You are a refund agent.", "Version three: be terse."):
        doc = content(prompt, model={"name": MODEL, "max_tokens": 256})
        version_publish(bundle=refunds, content=doc, message=prompt, actor=SYSTEM)
    suite = suite_create(name="refund-evals", description="", actor=SYSTEM)
    first = {"id": "old", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    suite_version_publish(
        suite=suite,
        content_doc={"items": [{**first, "expect": [{"type": "contains", "value": "hello"}]}]},
        message="m",
        actor=SYSTEM,
    )
    person("pat", PROMPT_ENGINEERS)
    phone = {"device_scale_factor": 2, "is_mobile": True} if width == 390 else {}
    context = browser.new_context(viewport={"width": width, "height": 844}, **phone)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        log_in(page, base_url, "pat")
        page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/2/")
        page.click("#open-playground")
        expect(page.locator("h1")).to_have_text("Playground: refunds")
        expect(page.locator("#playground-subject")).to_have_value("2")
        page.select_option("#playground-beside", "3")
        page.fill("#playground-message", "I want a refund")
        shot(page, f"playground-{width}-typed")
        page.click("#playground-send")
        turn = page.locator("#turn-1")
        expect(turn.locator(".playground-reply")).to_have_text("Answer 0: what is your order number?")
        expect(turn.locator(".playground-figures").first).to_contain_text("input tokens")
        expect(turn.locator(".playground-figures").first).to_contain_text("USD")
        expect(turn.locator(".playground-beside-reply")).to_have_text("Refund noted.")
        shot(page, f"playground-{width}-answered")
        assert len(provider.received) == 2 and provider.refused == []
        page.fill("#playground-message", "It is order 77")
        page.select_option("#playground-beside", "")
        page.click("#playground-send")
        expect(page.locator("#turn-2 .playground-reply")).to_have_text("Answer 2: what is your order number?")
        page.fill("#save-case-id", "order-77")
        page.select_option("#save-scorer", "contains")
        page.fill("#save-value", "order")
        page.click("#save-case-submit")
        expect(page.locator(".messagelist")).to_contain_text("Saved the conversation as case order-77")
        shot(page, f"playground-{width}-saved")
        sideways = page.evaluate(SIDEWAYS, width)
        assert sideways["scroll"] <= sideways["view"], sideways
    finally:
        context.close()
    saved = json.loads(bytes(SuiteVersion.objects.get(suite__name="refund-evals", number=2).canonical))
    assert [i["id"] for i in saved["items"]] == ["old", "order-77"]
