"""Issue 35: what the admin saves is what the author typed. Browsers submit textareas with CR LF;
every way text enters (the admin's forms, the API, the importers and `promptreg push`, which go
through the API) stores it with LF, so equal text is equal bytes; a re-save of an unchanged
version is "no change"; and a diff shows a whitespace-only change as one."""

import html
import json
import re

from access.actors import SYSTEM
from adminui.diffing import content_diff, side_by_side
from core.newlines import lf, lf_all
from knowledge import services as knowledge
from registry.contracts import diff_contents
from registry.models import Bundle, BundleVersion, Label
from registry.services import label_move, version_publish
from tests.adminui.test_adminui_views import engineer, u, version_post  # noqa: F401 (fixture)
from tests.conftest import content

PROMPT = "You are a refund agent.\nCall `process_refund` after checking the order.\n\nBe brief."


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def test_lf_rewrites_cr_lf_and_lone_cr_and_keeps_everything_else():
    assert lf("a\r\nb\rc\n\r\n d\t ") == "a\nb\nc\n\n d\t "
    same = "no carriage return"
    assert lf(same) is same
    doc = {"k\r\n": ["x\r\ny", 1, None, {"z": "\r"}], "n": 2.5}
    assert lf_all(doc) == {"k\n": ["x\ny", 1, None, {"z": "\n"}], "n": 2.5}
    untouched = {"a": ["b", {"c": "d"}]}
    assert lf_all(untouched) is untouched


def test_resaving_an_unchanged_version_from_the_admin_with_crlf_is_no_change(engineer, bundle, ops):  # noqa: F811
    # A version pushed from the CLI (LF), then opened in the admin and saved as the browser sends it.
    doc = content(PROMPT)
    version_publish(bundle=bundle, content=doc, message="from the CLI", actor=ops.actor)
    posted = version_post(
        system_prompt=crlf(PROMPT),
        tools=crlf(json.dumps(doc["tools"], indent=2)),
        model=crlf(json.dumps(doc["model"], indent=2)),
        message=crlf("re-saved\nunchanged"),
    )
    response = engineer.post(u("adminui_version_new", "refunds"), posted)
    assert response.status_code == 200
    assert "identical to" in response.content.decode()
    assert BundleVersion.objects.filter(bundle=bundle).count() == 1


def test_a_prompt_typed_in_the_admin_is_stored_with_lf(engineer, bundle, v1):  # noqa: F811
    response = engineer.post(
        u("adminui_version_new", "refunds"), version_post(system_prompt=crlf(PROMPT), message=crlf("two\nlines"))
    )
    assert response.status_code == 302
    version = BundleVersion.objects.get(bundle=bundle, number=2)
    assert json.loads(bytes(version.canonical))["system_prompt"] == PROMPT
    assert b"\\r" not in bytes(version.canonical)
    assert version.message == "two\nlines"


def test_the_bundles_description_from_the_admin_is_stored_with_lf(engineer, bundle):  # noqa: F811
    page = engineer.get(u("adminui_bundle_edit", "refunds")).content.decode()
    etag = html.unescape(re.search(r'name="etag" value="([^"]+)"', page).group(1))  # the form's precondition
    response = engineer.post(
        u("adminui_bundle_edit", "refunds"),
        {"description": crlf("Refunds.\nAll of them."), "when_to_use": "Refunds\r\nonly", "etag": etag},
    )
    assert response.status_code == 302
    stored = Bundle.objects.get(pk=bundle.pk)
    assert (stored.description, stored.when_to_use) == ("Refunds.\nAll of them.", "Refunds\nonly")


def test_the_api_stores_crlf_content_with_lf_and_sees_it_as_the_same_content(publisher, bundle):
    first = publisher.post("/api/v1/bundles/refunds/versions/", {"content": content(PROMPT), "message": "lf"})
    assert first.status_code == 201
    doc = content(crlf(PROMPT))
    doc["tools"][0]["description"] = "Refund\r\nan order."
    again = publisher.post("/api/v1/bundles/refunds/versions/", {"content": content(crlf(PROMPT)), "message": "crlf"})
    assert again.status_code == 200, again.json()
    assert again.json()["number"] == 1
    other = publisher.post("/api/v1/bundles/refunds/versions/", {"content": doc, "message": "tool text"})
    stored = json.loads(bytes(BundleVersion.objects.get(bundle=bundle, number=other.json()["number"]).canonical))
    assert stored["tools"][0]["description"] == "Refund\nan order."


def test_reasons_and_knowledge_files_are_stored_with_lf(bundle, v1, ops):
    label, _ = label_move(bundle=bundle, name="staging", version=v1, actor=ops.actor, reason="first\r\nrelease")
    assert label.history.first().history_change_reason == "first\nrelease"
    assert Label.objects.get(pk=label.pk).version_id == v1.pk
    pack = knowledge.pack_create(name="ops", description="Ops\r\nnotes", actor=SYSTEM)
    assert pack.description == "Ops\nnotes"
    file, _ = knowledge.file_put(pack=pack, path="sre/DUTY.md", content="Page\r\nthe on-call.\r\n", actor=SYSTEM)
    assert file.content == "Page\nthe on-call.\n"


def test_the_diff_shows_a_whitespace_only_change_as_such():
    rows = side_by_side("one\r\ntwo\n", "one\ntwo \n")
    assert [r.kind for r in rows] == ["replace", "replace"]
    assert '<span class="word-del ws">\u240d\u240a</span>' in rows[0].left  # CR LF drawn
    assert '<span class="word-ins ws">\u240a</span>' in rows[0].right
    assert '<span class="word-ins ws">\u00b7\u240a</span>' in rows[1].right  # the trailing space
    assert side_by_side("same\n", "same\n")[0].left == "same"
    old, new = content("One.\r\nTwo."), content("One.\nTwo.")
    diff = content_diff(old, new)
    assert diff.whitespace_only and not diff.same and diff.prompt_changed
    assert not content_diff(content("One."), content("Two.")).whitespace_only
    (change,) = diff_contents(old, new).changes
    assert change.message.startswith("Only the system prompt's whitespace changed")
