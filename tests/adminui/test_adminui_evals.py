"""The admin's evaluation pages (Django's test client): suites written as rows of cases and
scorers or as JSON, checked by the services the API calls (the same problems, shown beside the
row they are about), two runs side by side, and a version's evaluations with a run started on
the worker."""

import json
import re

import pytest

from access.models import Role
from adminui.groups import OPS, PROMPT_ENGINEERS
from evals import endpoints
from evals.models import EvalJob, Suite, SuiteVersion
from tests.adminui.test_adminui_views import client_for, make_user, u, words
from tests.conftest import content, make_api
from tests.evals.test_evals import good_replies

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(db):
    return client_for(make_user("pat", PROMPT_ENGINEERS))


def rows(*typed: dict) -> dict:
    data = {"rows": str(len(typed))}
    for i, row in enumerate(typed):
        data.update({f"row-{i}-{key}": value for key, value in row.items()})
    return data


CASES = rows(
    {"case": "asks-order", "message": "I want a refund", "tags": "refunds, first", "scorer": "contains",
     "value": "order number"},
    {"scorer": "max_tokens", "value": "200"},  # a second scorer for the case above
    {"case": "calls-tool", "message": "Refund order 1042", "variables": "", "scorer": "tool_call",
     "value": "process_refund", "options": '{"arguments": {"order_id": "1042"}}'},
)  # fmt: skip


def test_a_suite_is_written_as_rows_of_cases_and_scorers(engineer):
    data = {"name": "refund-evals", "description": "Refunds", "message": "first", **CASES}
    response = engineer.post(u("adminui_suite_new"), data)
    assert response.status_code == 302, words(response)[-1500:]
    assert response["Location"] == u("adminui_suite", "refund-evals")
    doc = json.loads(bytes(SuiteVersion.objects.get(suite__name="refund-evals", number=1).canonical))
    assert doc["items"] == [
        {
            "id": "asks-order",
            "input": {"messages": [{"role": "user", "content": "I want a refund"}]},
            "expect": [{"type": "contains", "value": "order number"}, {"type": "max_tokens", "value": 200}],
            "tags": ["first", "refunds"],
        },
        {
            "id": "calls-tool",
            "input": {"messages": [{"role": "user", "content": "Refund order 1042"}]},
            "expect": [{"type": "tool_call", "name": "process_refund", "arguments": {"order_id": "1042"}}],
            "tags": [],
        },
    ]
    page = words(engineer.get(response["Location"]))
    assert "asks-order" in page and "calls-tool" in page
    assert "refund-evals" in words(engineer.get(u("adminui_suites")))


def test_the_form_refuses_what_the_api_refuses_beside_the_row_and_writes_nothing(engineer):
    bad = rows(
        {"case": "ok", "message": "hello", "scorer": "contains", "value": "hi"},
        {"case": "lookaround", "message": "hello", "scorer": "regex", "value": "(?=x)y"},
        {"case": "bad-options", "message": "hello", "scorer": "contains", "value": "x", "options": "{nope"},
    )
    response = engineer.post(u("adminui_suite_new"), {"name": "s1", "message": "m", **bad})
    assert response.status_code == 400
    assert "options: not JSON" in words(response)
    assert not Suite.objects.exists()
    # Without the row whose typing is wrong, the service's own problem comes back beside its row.
    del bad["row-2-case"], bad["row-2-message"], bad["row-2-scorer"], bad["row-2-value"], bad["row-2-options"]
    response = engineer.post(u("adminui_suite_new"), {"name": "s1", "message": "m", **bad})
    assert response.status_code == 400
    row = re.search(r'id="case-row-1".*?</tr>', response.content.decode(), re.S).group(0)
    api = make_api(Role.PUBLISHER)
    api.post("/api/v1/suites/", {"name": "api-twin"})
    doc = {"items": [{"id": "lookaround", "input": {"messages": [{"role": "user", "content": "hello"}]},
                      "expect": [{"type": "regex", "pattern": "(?=x)y"}]}]}  # fmt: skip
    said = api.post("/api/v1/suites/api-twin/versions/", {"content": doc, "message": "m"}).json()["error"]["details"]
    assert said["items[0].expect[0]"][0] in words(type("R", (), {"content": row.encode()})())
    assert not Suite.objects.filter(name="s1").exists()
    box = engineer.post(
        u("adminui_suite_new"), {"name": "s2", "message": "m", "items_json": '{"id": "x", "colour": 1}', "rows": "1"}
    )
    assert box.status_code == 400 and "items[0].colour: Unknown field" in words(box)
    taken = engineer.post(u("adminui_suite_new"), {"name": "api-twin", "message": "m", **CASES})
    assert taken.status_code == 400 and "exists" in words(taken)


def test_the_next_version_keeps_the_latest_items_as_json_and_adds_rows(engineer):
    engineer.post(u("adminui_suite_new"), {"name": "refund-evals", "message": "first", **CASES})
    page = engineer.get(u("adminui_suite", "refund-evals"))
    typed = re.search(r'<textarea name="items_json"[^>]*>(.*?)</textarea>', page.content.decode(), re.S).group(1)
    assert "asks-order" in typed
    more = rows({"case": "polite", "message": "thanks", "scorer": "equals", "value": "You're welcome."})
    from html import unescape

    response = engineer.post(
        u("adminui_suite", "refund-evals"), {"message": "a third case", "items_json": unescape(typed), **more}
    )
    assert response.status_code == 302, words(response)[-1500:]
    latest = SuiteVersion.objects.get(suite__name="refund-evals", number=2)
    assert [i["id"] for i in json.loads(bytes(latest.canonical))["items"]] == ["asks-order", "calls-tool", "polite"]
    grown = engineer.post(u("adminui_suite_new"), {"name": "x", "message": "m", "more": "1", "rows": "2"})
    assert grown.status_code == 200 and 'id="case-row-7"' in grown.content.decode()


def test_the_compare_page_shows_two_runs_side_by_side_flips_first(engineer, bundle, v1, v2, ops):
    from tests.evals.test_evals import publish_suite

    publish_suite(ops)
    ci = make_api(Role.CI, "ci")
    body = {"suite": "refund-evals", "suite_version": 1, "provider": "p", "model": "m-1", "threshold": 1}
    a = ci.post("/api/v1/bundles/refunds/versions/1/evals/", {**body, "results": good_replies()}).json()["id"]
    broken = good_replies()
    broken[1]["reply"] = {"text": "Done."}
    b = ci.post("/api/v1/bundles/refunds/versions/2/evals/", {**body, "results": broken}).json()["id"]
    page = engineer.get(u("adminui_eval_compare"), {"a": a, "b": b})
    assert page.status_code == 200
    first = re.search(r'<tr data-item="([^"]+)" class="flip-(\w+)"', page.content.decode())
    assert first.groups() == ("refund-calls-tool", "broken")
    assert engineer.get(u("adminui_eval_compare"), {"a": "nope", "b": b}).status_code == 400
    version_page = words(engineer.get(u("adminui_version", "refunds", 1)))
    assert "Evaluations" in version_page and "refund-evals@1" in version_page and "success" in version_page


def test_ops_start_a_run_on_the_worker_from_the_version_page(bundle, ops, settings):
    from tests.evals.test_evals import publish_suite

    doc = content("priced", model={"name": "claude-haiku-4-5"})
    ops.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "v1"})
    publish_suite(ops)
    olga = client_for(make_user("olga", OPS))
    settings.EVAL_PROVIDERS = {}
    assert "EVAL_PROVIDERS" in words(olga.get(u("adminui_version", "refunds", 1)))
    value = [{"name": "standin", "format": "anthropic", "base_url": "http://127.0.0.1:9"}]
    settings.EVAL_PROVIDERS = endpoints.parse(json.dumps(value))
    assert 'id="eval-start"' in olga.get(u("adminui_version", "refunds", 1)).content.decode()
    form = {"suite": "refund-evals", "provider": "standin", "runs": "2", "threshold": "0.5"}
    response = olga.post(u("adminui_eval_start", "refunds", 1), form, follow=True)
    assert "Queued a run of refund-evals@1" in words(response)
    job = EvalJob.objects.get()
    assert (job.runs, job.threshold, job.created_by, job.status) == (2, 0.5, "user:olga", "queued")
    refused = olga.post(u("adminui_eval_start", "refunds", 1), {**form, "provider": "other"}, follow=True)
    assert "Not started: Unknown provider" in words(refused) and EvalJob.objects.count() == 1
    pat = client_for(make_user("pat", PROMPT_ENGINEERS))
    assert "needs the ops role" in words(pat.get(u("adminui_version", "refunds", 1)))
    assert "Not started" in words(pat.post(u("adminui_eval_start", "refunds", 1), form, follow=True))


def test_a_new_suite_whose_version_is_refused_is_not_created_either(engineer):
    judge = '{"bundle": "no-such-judge", "content_hash": "' + "a" * 64 + '"}'
    typed = rows({"case": "judged", "message": "hello", "scorer": "judge", "options": judge})
    response = engineer.post(u("adminui_suite_new"), {"name": "judged", "message": "m", **typed})
    assert response.status_code == 400 and "no-such-judge" in words(response)
    assert not Suite.objects.filter(name="judged").exists()
