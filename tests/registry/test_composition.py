"""Composition pinned by hash (issue 27): a prompt includes another bundle's prompt, resolved at
publish; the version stores the resolved text and the snippet version and hash it used, so a
later change of the snippet never reaches a published version (docs/releases.md, Composition)."""

import hashlib
import json
import re
import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from adminui.forms import VersionForm
from core import limits
from core.errors import Forbidden, InvalidContent
from registry import composition, includes
from registry.canonical import canonical_bytes, canonicalise
from registry.models import Bundle, BundleVersion, Include
from registry.selectors import bundles_including, version_diff
from registry.services import bundle_create, label_move, version_publish, version_revoke
from registry.transfer import bundle_export, bundle_import
from tests.conftest import CONTENT_V1, Api, content

TONE_1 = "Be kind and brief."
TONE_2 = "Be warm, kind and brief."
SOURCE = "Hello.\n{{> tone@production}}\nCall `process_refund` after checking the order."


def publish(bundle: Bundle, actor: Any, prompt: str, **extra: Any) -> BundleVersion:
    return version_publish(bundle=bundle, content=content(prompt, **extra), message="m", actor=actor).version


def stored(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(version.canonical))


def refused(bundle: Bundle, actor: Any, prompt: str, **extra: Any) -> dict[str, list[str]]:
    with pytest.raises(InvalidContent) as caught:
        publish(bundle, actor, prompt, **extra)
    return caught.value.details


@pytest.fixture
def tone(db, ops) -> Bundle:
    return bundle_create(name="tone", actor=ops.actor)


@pytest.fixture
def tone_v1(tone, ops) -> BundleVersion:
    version = publish(tone, ops.actor, TONE_1)
    label_move(bundle=tone, name="production", version=version, actor=ops.actor, reason="first")
    return version


@pytest.fixture
def tone_v2(tone, ops, tone_v1) -> BundleVersion:
    """A newer tone, not yet under production."""
    return publish(tone, ops.actor, TONE_2)


@pytest.fixture
def support(db, ops) -> Bundle:
    return bundle_create(name="support", actor=ops.actor)


def scoped_publisher(*scopes: str) -> Api:
    key, secret = api_key_create(name="scoped", role=Role.PUBLISHER, scopes=list(scopes), actor=SYSTEM)
    return Api(secret, key.as_actor())


# Resolution ----------------------------------------------------------------------------------------------


def test_it_stores_the_resolved_text_and_the_snippet_it_used(support, tone_v1, ops):
    version = publish(support, ops.actor, SOURCE)
    doc = stored(version)
    assert doc["system_prompt"] == f"Hello.\n{TONE_1}\nCall `process_refund` after checking the order."
    assert doc["system_prompt_source"] == SOURCE
    assert doc["includes"] == [
        {"marker": "{{> tone@production}}", "bundle": "tone", "version": 1, "content_hash": tone_v1.content_hash}
    ]
    # The hash covers the resolved text and the pin: it is the SHA-256 of exactly these bytes.
    assert bytes(version.canonical) == canonical_bytes(doc)
    assert version.content_hash == hashlib.sha256(bytes(version.canonical)).hexdigest()


def test_it_includes_by_version_number_through_the_api(support, tone_v2, publisher):
    response = publisher.post(
        "/api/v1/bundles/support/versions/",
        {"content": content("Start. {{> tone@2}} End."), "message": "pin tone 2"},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["content"]["system_prompt"] == f"Start. {TONE_2} End."
    assert body["content"]["includes"][0] == {
        "marker": "{{> tone@2}}",
        "bundle": "tone",
        "version": 2,
        "content_hash": tone_v2.content_hash,
    }
    canonical = publisher.get(f"/api/v1/bundles/support/versions/{body['number']}/canonical/")
    assert hashlib.sha256(canonical.content).hexdigest() == body["content_hash"]
    assert TONE_2.encode() in canonical.content


def test_it_resolves_the_same_snippet_once_per_distinct_marker(support, tone_v1, ops):
    version = publish(support, ops.actor, "{{> tone@production}} and again {{> tone@production}} and {{> tone@1}}")
    doc = stored(version)
    assert doc["system_prompt"] == f"{TONE_1} and again {TONE_1} and {TONE_1}"
    assert [e["marker"] for e in doc["includes"]] == ["{{> tone@production}}", "{{> tone@1}}"]


def test_it_includes_a_snippet_with_includes_of_its_own_resolved_as_it_was_published(db, ops, support, tone_v1):
    greeting = bundle_create(name="greeting", actor=ops.actor)
    g1 = publish(greeting, ops.actor, "Hi! {{> tone@production}}")
    label_move(bundle=greeting, name="production", version=g1, actor=ops.actor, reason="first")
    version = publish(support, ops.actor, "{{> greeting@production}} Then help.")
    assert stored(version)["system_prompt"] == f"Hi! {TONE_1} Then help."
    assert [e["bundle"] for e in stored(version)["includes"]] == ["greeting"]


# Pinned by hash: nothing after the publish reaches the version ---------------------------------------------


def test_a_later_snippet_move_or_version_never_changes_a_published_version(support, tone, tone_v1, ops):
    version = publish(support, ops.actor, SOURCE)
    before = (bytes(version.canonical), version.content_hash)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    publish(tone, ops.actor, "Be curt.")
    again = BundleVersion.objects.get(pk=version.pk)
    assert (bytes(again.canonical), again.content_hash) == before
    assert TONE_1 in stored(again)["system_prompt"] and TONE_2 not in stored(again)["system_prompt"]


def test_publishing_the_same_source_is_idempotent_until_the_snippet_moves(support, tone, tone_v1, ops):
    first = version_publish(bundle=support, content=content(SOURCE), message="m", actor=ops.actor)
    same = version_publish(bundle=support, content=content(SOURCE), message="m", actor=ops.actor)
    assert (first.created, same.created, same.version.pk) == (True, False, first.version.pk)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    picked_up = version_publish(bundle=support, content=content(SOURCE), message="m", actor=ops.actor)
    assert picked_up.created and picked_up.version.number == 2
    assert TONE_2 in stored(picked_up.version)["system_prompt"]
    assert stored(picked_up.version)["includes"][0]["content_hash"] == tone_v2.content_hash


def test_a_stored_document_published_again_is_the_same_version(support, tone, tone_v1, ops):
    """What a pull and a push, or an import, send back: it pins its snippets by hash, so even
    after the snippet moved it is the same version, byte for byte."""
    version = publish(support, ops.actor, SOURCE)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    again = version_publish(bundle=support, content=stored(version), message="m", actor=ops.actor)
    assert (again.created, again.version.pk) == (False, version.pk)
    # Its authoring form (what the admin's "New version from this one" shows) picks up the move.
    authored = includes.source_of(stored(version))
    assert authored["system_prompt"] == SOURCE and not includes.FIELDS & set(authored)
    newer = version_publish(bundle=support, content=authored, message="m", actor=ops.actor)
    assert newer.created and TONE_2 in stored(newer.version)["system_prompt"]
    assert VersionForm.initial_from(stored(version))["system_prompt"] == SOURCE


def test_a_stored_document_whose_text_is_not_its_source_is_refused(support, tone_v1, ops):
    forged = stored(publish(support, ops.actor, SOURCE))
    forged["system_prompt"] = forged["system_prompt"].replace(TONE_1, "Be rude.")
    with pytest.raises(InvalidContent) as caught:
        version_publish(bundle=support, content=forged, message="m", actor=ops.actor)
    assert "content.system_prompt" in caught.value.details
    unknown = stored(BundleVersion.objects.get(bundle=support))
    unknown["includes"][0]["content_hash"] = "0" * 64
    with pytest.raises(InvalidContent) as caught:
        version_publish(bundle=support, content=unknown, message="m", actor=ops.actor)
    assert "content.includes[0]" in caught.value.details


def test_a_version_without_includes_keeps_the_bytes_and_hash_it_always_had(bundle, ops):
    version = version_publish(bundle=bundle, content=content(), message="m", actor=ops.actor).version
    # The canonical form written out by hand, as before composition existed: no new key.
    expected = json.dumps(
        {**CONTENT_V1, "guardrails": {}, "metadata": {}, "output_schema": None},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    assert bytes(version.canonical) == expected
    assert version.content_hash == hashlib.sha256(expected).hexdigest()
    assert not includes.FIELDS & set(stored(version))


# Publish errors ------------------------------------------------------------------------------------------


def test_a_marker_that_names_nothing_is_a_400_naming_the_field(support, tone_v1, publisher):
    for prompt, says in [
        ("{{> nosuch@production}}", "no bundle named 'nosuch'"),
        ("{{> tone@staging}}", "has no label 'staging'"),
        ("{{> tone@9}}", "has no version 9"),
        ("{{> Tone@production}}", "does not start an include"),
        ("{{>tone}}", "does not start an include"),
    ]:
        response = publisher.post("/api/v1/bundles/support/versions/", {"content": content(prompt), "message": "m"})
        assert response.status_code == 400, prompt
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert says in " ".join(error["details"]["content.system_prompt"]), (prompt, error)


def test_a_revoked_snippet_version_cannot_be_included(support, tone, tone_v2, ops):
    version_revoke(version=tone_v2, actor=ops.actor, reason="bad")
    assert "revoked" in refused(support, ops.actor, "{{> tone@2}}")["content.system_prompt"][0]


def test_a_bundle_cannot_include_itself(tone, tone_v1, ops):
    assert "cycle" in refused(tone, ops.actor, "{{> tone@production}}")["content.system_prompt"][0]


def test_a_cycle_through_another_bundle_is_a_400(support, tone, tone_v1, ops):
    s1 = publish(support, ops.actor, "Support. {{> tone@production}}")
    label_move(bundle=support, name="production", version=s1, actor=ops.actor, reason="first")
    details = refused(tone, ops.actor, "Tone. {{> support@production}}")
    assert "cycle" in details["content.system_prompt"][0]


def test_an_include_outside_the_key_s_scope_is_a_403_whether_or_not_it_exists(support, tone_v1):
    scoped = scoped_publisher("support")
    for prompt in ("{{> tone@production}}", "{{> secret@production}}"):
        response = scoped.post("/api/v1/bundles/support/versions/", {"content": content(prompt), "message": "m"})
        assert response.status_code == 403, response.json()
        error = response.json()["error"]
        assert error["code"] == "permission_denied"
        assert "outside this key's scopes" in error["details"]["content.system_prompt"][0]
    with pytest.raises(Forbidden):
        publish(support, scoped.actor, "{{> tone@production}}")


# Hostile input: the worst values, answered at once ---------------------------------------------------------


def test_too_many_markers_are_refused_before_any_lookup(support, tone_v1, ops):
    prompt = " ".join(["{{> tone@production}}"] * (includes.MAX_INCLUDES + 1))
    assert "at most" in refused(support, ops.actor, prompt)["content.system_prompt"][0]
    worst = "{{> tone@production}}" * 9000  # 189,000 characters: within the prompt limit
    started = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        assert "at most" in refused(support, ops.actor, worst)["content.system_prompt"][0]
    assert not [q for q in queries.captured_queries if "registry_label" in q["sql"]]
    assert time.monotonic() - started < 1


def test_exactly_the_limit_of_markers_is_allowed(support, tone_v1, ops):
    prompt = " ".join(["{{> tone@production}}"] * includes.MAX_INCLUDES)
    assert stored(publish(support, ops.actor, prompt))["system_prompt"] == " ".join([TONE_1] * includes.MAX_INCLUDES)


def test_a_huge_marker_is_not_a_marker(support, ops):
    for prompt in ("{{> " + "a" * 190_000 + "@production}}", "{{> tone@" + "p" * 190_000 + "}}", "{{>" * 20):
        details = refused(support, ops.actor, prompt)
        assert "does not start an include" in details["content.system_prompt"][0]


def test_a_chain_deeper_than_the_limit_is_a_400(db, ops):
    names = [f"level{i}" for i in range(includes.MAX_DEPTH + 2)]
    bundles = [bundle_create(name=name, actor=ops.actor) for name in names]
    previous = None
    for depth, bundle in enumerate(reversed(bundles)):
        prompt = f"Level {depth}." + (f" {{{{> {previous}@production}}}}" if previous else "")
        if depth <= includes.MAX_DEPTH:
            version = publish(bundle, ops.actor, prompt)
            label_move(bundle=bundle, name="production", version=version, actor=ops.actor, reason="chain")
        else:
            assert "deeper than" in refused(bundle, ops.actor, prompt)["content.system_prompt"][0]
        previous = bundle.name


def test_a_chain_too_deep_only_along_the_longer_of_two_paths_to_a_snippet_is_a_400(db, ops):
    """top includes x directly (x, y, z: 3 levels) and through b and c (b, c, x, y, z: 5): the
    walk must not stop at x the second time it meets it."""
    made: dict[str, BundleVersion] = {}
    for name, prompt in [("z", "Z."), ("y", "Y {{> z@1}}"), ("x", "X {{> y@1}}"), ("c", "C {{> x@1}}")]:
        made[name] = publish(bundle_create(name=name, actor=ops.actor), ops.actor, prompt)
    made["b"] = publish(bundle_create(name="b", actor=ops.actor), ops.actor, "B {{> c@1}}")
    top = bundle_create(name="top", actor=ops.actor)
    assert "deeper than" in refused(top, ops.actor, "{{> x@1}} {{> b@1}}")["content.system_prompt"][0]


def test_a_resolved_prompt_over_the_limit_is_a_400(support, tone, ops):
    big = publish(tone, ops.actor, "x" * 150_000)
    label_move(bundle=tone, name="production", version=big, actor=ops.actor, reason="big")
    details = refused(support, ops.actor, "{{> tone@production}} {{> tone@1}}")
    assert "With its includes" in details["content.system_prompt"][0]


def test_one_budget_of_snippet_reads_covers_every_marker_of_a_publish(db, support, ops):
    """Five markers whose snippets include 20 versions each: 105 versions in all, past the one
    budget the whole publish shares (each marker alone stays within it), refused in a bounded
    number of queries: one per level of the walk, not one per snippet."""
    leaf = bundle_create(name="leaf", actor=ops.actor)
    for n in range(1, 101):
        publish(leaf, ops.actor, f"Leaf {n}.")
    mids = []
    for i in range(5):
        mid = bundle_create(name=f"mid{i}", actor=ops.actor)
        publish(mid, ops.actor, " ".join(f"{{{{> leaf@{20 * i + k}}}}}" for k in range(1, 21)))
        mids.append(mid.name)
    prompt = " ".join(f"{{{{> {name}@1}}}}" for name in mids)
    with CaptureQueriesContext(connection) as queries:
        details = refused(support, ops.actor, prompt)
    assert f"more than {composition.MAX_NESTED_READS} versions" in details["content.system_prompt"][0]
    assert len(queries.captured_queries) <= 5 * 3 + includes.MAX_DEPTH + 5
    # Within the budget the same shape publishes, and still without one read per snippet.
    with CaptureQueriesContext(connection) as queries:
        version = publish(support, ops.actor, " ".join(f"{{{{> {name}@1}}}}" for name in mids[:4]))
    assert [e["bundle"] for e in stored(version)["includes"]] == mids[:4]
    assert len([q for q in queries.captured_queries if "registry_include" in q["sql"]]) <= includes.MAX_DEPTH + 2


def resolved(source: str, *pins: tuple[str, BundleVersion]) -> dict[str, Any]:
    """A document that comes with its includes already resolved (as an export or a pull does),
    made by hand: each marker of `source`, in order, pinned to the given version."""
    found, _ = includes.markers(source)
    texts = {m.text: stored(v)["system_prompt"] for m, (_, v) in zip(found, pins, strict=True)}
    entries = [
        {"marker": m.text, "bundle": name, "version": v.number, "content_hash": v.content_hash}
        for m, (name, v) in zip(found, pins, strict=True)
    ]
    return content(includes.substitute(source, texts), system_prompt_source=source, includes=entries)


def refused_resolved(bundle: Bundle, actor: Any, doc: dict[str, Any]) -> dict[str, list[str]]:
    with pytest.raises(InvalidContent) as caught:
        version_publish(bundle=bundle, content=doc, message="m", actor=actor)
    return caught.value.details


def test_a_resolved_document_pinning_a_revoked_snippet_version_is_refused(support, tone, tone_v2, ops):
    version_revoke(version=tone_v2, actor=ops.actor, reason="bad")
    details = refused_resolved(support, ops.actor, resolved("Hi. {{> tone@2}}", ("tone", tone_v2)))
    assert "revoked" in details["content.includes[0]"][0]


def test_a_resolved_document_making_a_cycle_through_another_bundle_is_refused(support, tone, tone_v1, ops):
    s1 = publish(support, ops.actor, "Support. {{> tone@production}}")
    details = refused_resolved(tone, ops.actor, resolved("Tone. {{> support@1}}", ("support", s1)))
    assert "cycle" in details["content.includes[0]"][0]


def test_a_resolved_document_nesting_deeper_than_the_limit_is_refused(db, ops):
    names = [f"level{i}" for i in range(includes.MAX_DEPTH + 1)]
    previous: BundleVersion | None = None
    for depth, name in enumerate(reversed(names)):
        bundle = bundle_create(name=name, actor=ops.actor)
        prompt = f"Level {depth}." + (f" {{{{> {previous.bundle.name}@1}}}}" if previous else "")
        previous = publish(bundle, ops.actor, prompt)
    assert previous is not None
    top = bundle_create(name="top", actor=ops.actor)
    doc = resolved("Top. {{> level0@1}}", ("level0", previous))
    assert "deeper than" in refused_resolved(top, ops.actor, doc)["content.includes[0]"][0]


# Variables: a marker is not a variable; a snippet's variables are the includer's ---------------------------


def test_a_marker_is_not_taken_for_an_undeclared_variable(support, tone_v1, ops):
    declared = {"name": {"type": "string", "default": "you"}}
    version = publish(support, ops.actor, "Hi {{name}}. {{> tone@production}}", variables=declared)
    assert stored(version)["system_prompt"] == f"Hi {{{{name}}}}. {TONE_1}"


def test_a_snippet_s_variable_must_be_declared_by_the_bundle_that_includes_it(support, tone, ops):
    snippet = publish(tone, ops.actor, "Sign as {{agent}}.", variables={"agent": {"type": "string"}})
    label_move(bundle=tone, name="production", version=snippet, actor=ops.actor, reason="first")
    details = refused(support, ops.actor, "{{> tone@production}}", variables={})
    assert "not declared" in details["content.system_prompt"][0]


# Dependents and the diff -----------------------------------------------------------------------------------


def test_publishing_the_snippet_lists_the_bundles_that_would_pick_it_up(support, tone, tone_v1, ops, publisher):
    publish(support, ops.actor, SOURCE)
    response = publisher.post("/api/v1/bundles/tone/versions/", {"content": content(TONE_2), "message": "warmer"})
    assert response.status_code == 201
    assert response.json()["dependents"] == [
        {
            "bundle": "support",
            "version": 1,
            "marker": "{{> tone@production}}",
            "pinned_version": 1,
            "pinned_hash": tone_v1.content_hash,
            "current_version": 1,
            "outdated": False,
        }
    ]
    tone_v2 = BundleVersion.objects.get(bundle=tone, number=2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    listed = publisher.get("/api/v1/bundles/tone/dependents/").json()
    assert listed["bundle"] == "tone"
    assert [(d["bundle"], d["current_version"], d["outdated"]) for d in listed["results"]] == [("support", 2, True)]
    assert bundles_including(bundle_name="support") == []


def test_dependents_only_show_bundles_in_the_key_s_scope(support, tone_v1, ops):
    publish(support, ops.actor, SOURCE)
    scoped = scoped_publisher("tone")
    assert scoped.get("/api/v1/bundles/tone/dependents/").json()["results"] == []
    assert bundles_including(bundle_name="tone", actor=scoped.actor) == []


@pytest.fixture
def many_dependents(tone, tone_v1, ops) -> list[str]:
    """One more bundle including tone@production than an answer lists."""
    names = [f"dep{i:03}" for i in range(limits.DEPENDENTS_MAX + 1)]
    for name in reversed(names):  # published out of name order: the answers sort them
        publish(bundle_create(name=name, actor=ops.actor), ops.actor, f"{name}: {{{{> tone@production}}}}")
    return names


def test_publish_and_label_move_answers_list_the_first_dependents_by_name_and_the_total(tone, many_dependents, ops):
    published = ops.post("/api/v1/bundles/tone/versions/", {"content": content(TONE_2), "message": "warmer"})
    assert published.status_code == 201, published.json()
    body = published.json()
    assert [d["bundle"] for d in body["dependents"]] == many_dependents[: limits.DEPENDENTS_MAX]
    assert body["dependents_total"] == len(many_dependents)
    with CaptureQueriesContext(connection) as queries:
        moved = ops.put("/api/v1/bundles/tone/labels/production/", {"version": 2, "reason": "warmer"})
    assert moved.status_code == 200, moved.json()
    body = moved.json()
    assert [d["bundle"] for d in body["dependents"]] == many_dependents[: limits.DEPENDENTS_MAX]
    assert body["dependents_total"] == len(many_dependents)
    assert all(d["outdated"] for d in body["dependents"])
    reads = [q["sql"] for q in queries.captured_queries if 'FROM "registry_include"' in q["sql"]]
    assert reads and all("LIMIT" in sql or "COUNT(" in sql for sql in reads)


def test_within_the_cap_the_answer_lists_every_dependent_without_a_count(support, tone, tone_v1, ops):
    publish(support, ops.actor, SOURCE)
    with CaptureQueriesContext(connection) as queries:
        body = ops.post("/api/v1/bundles/tone/versions/", {"content": content(TONE_2), "message": "m"}).json()
    assert ([d["bundle"] for d in body["dependents"]], body["dependents_total"]) == (["support"], 1)
    assert not [q for q in queries.captured_queries if 'FROM "registry_include"' in q["sql"] and "COUNT(" in q["sql"]]


def test_dependents_are_paged_by_cursor(tone, many_dependents, publisher):
    seen: list[str] = []
    url: str | None = "/api/v1/bundles/tone/dependents/?limit=40"
    pages = 0
    while url:
        response = publisher.get(url)
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["bundle"] == "tone" and len(body["results"]) <= 40
        seen += [d["bundle"] for d in body["results"]]
        url = body["next"]
        pages += 1
    assert (seen, pages) == (many_dependents, 3)
    first = publisher.get("/api/v1/bundles/tone/dependents/").json()
    assert len(first["results"]) == 50 and first["next"]
    assert publisher.get("/api/v1/bundles/tone/dependents/?cursor=AAAA").status_code == 400


def test_the_diff_shows_an_include_change_as_its_own_entry(support, tone, tone_v1, ops, agent):
    publish(support, ops.actor, SOURCE)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    new = publish(support, ops.actor, SOURCE)
    old = BundleVersion.objects.get(bundle=support, number=1)
    kinds = {c.kind: c for c in version_diff(old=old, new=new).changes}
    assert kinds["include_changed"].path == "includes[tone@production]"
    assert "version 1" in kinds["include_changed"].message and "version 2" in kinds["include_changed"].message
    assert "prompt_changed" in kinds
    answer = agent.get("/api/v1/bundles/support/versions/2/diff/").json()
    assert {"include_changed", "prompt_changed"} <= {c["kind"] for c in answer["changes"]}
    assert answer["level"] == "patch"


def test_the_diff_shows_includes_added_and_removed(support, tone_v1, ops):
    plain = publish(support, ops.actor, "No snippet.")
    composed = publish(support, ops.actor, SOURCE)
    added = {c.kind: c.path for c in version_diff(old=plain, new=composed).changes}
    removed = {c.kind: c.path for c in version_diff(old=composed, new=plain).changes}
    assert added["include_added"] == removed["include_removed"] == "includes[tone@production]"


def test_canonical_form_of_a_stored_document_is_itself(support, tone_v1, ops):
    """An export's bytes must import as themselves (registry.transfer re-canonicalises them)."""
    version = publish(support, ops.actor, SOURCE)
    _, data, digest = canonicalise(stored(version))
    assert (data, digest) == (bytes(version.canonical), version.content_hash)


def test_an_exported_composed_bundle_imports_as_the_same_bytes(support, tone, tone_v1, ops):
    version = publish(support, ops.actor, SOURCE)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    document, objects = bundle_export(bundle=support, actor=ops.actor)
    result = bundle_import(document={**document, "name": "support-copy"}, objects=objects, actor=ops.actor)
    copied = BundleVersion.objects.get(bundle__name="support-copy", number=result.versions_created[0])
    assert (bytes(copied.canonical), copied.content_hash) == (bytes(version.canonical), version.content_hash)


@pytest.mark.parametrize("prompt", ["Write {{> x as it is.", "Old text: {{> tone@production}} was literal then."])
def test_an_import_keeps_the_bytes_of_a_version_an_older_release_stored_with_a_literal_marker(tone_v1, ops, prompt):
    """Before composition a prompt could hold `{{>` as text. Import stores verified bytes as they
    are: it neither refuses such a version nor resolves a marker it happens to spell."""
    legacy = bundle_create(name="legacy", actor=ops.actor)
    _, canonical, digest = canonicalise(content(prompt))
    old = BundleVersion.objects.create(  # as the older release stored it, without publish's checks
        bundle=legacy, number=1, canonical=canonical, content_hash=digest, message="old", author="ops"
    )
    document, objects = bundle_export(bundle=legacy, actor=ops.actor)
    result = bundle_import(document={**document, "name": "legacy-copy"}, objects=objects, actor=ops.actor)
    copied = BundleVersion.objects.get(bundle__name="legacy-copy", number=result.versions_created[0])
    assert (bytes(copied.canonical), copied.content_hash) == (bytes(old.canonical), old.content_hash)


def test_an_import_still_needs_the_snippets_it_pins(support, tone_v1, ops):
    publish(support, ops.actor, SOURCE)
    document, objects = bundle_export(bundle=support, actor=ops.actor)
    doc = json.loads(next(iter(objects.values())))
    doc["includes"][0]["content_hash"] = "0" * 64  # a tone version this registry does not have
    _, canonical, digest = canonicalise(doc)
    document = {**document, "name": "support-copy", "labels": []}
    document["versions"] = [{**document["versions"][0], "content_hash": digest}]
    with pytest.raises(InvalidContent) as caught:
        bundle_import(document=document, objects={digest: canonical}, actor=ops.actor)
    assert "import the included bundle first" in caught.value.details["content.includes[0]"][0]


def test_an_import_refuses_includes_its_prompt_does_not_contain_as_a_publish_does(support, tone_v1, ops):
    # Issue 36: an import stored a version whose `includes` claimed a snippet its text lacks
    # (forged provenance, and a dependents list naming it); a publish refuses the same content.
    forged = stored(publish(support, ops.actor, SOURCE))
    forged["system_prompt"] = forged["system_prompt"].replace(TONE_1, "Be rude.")
    with pytest.raises(InvalidContent) as published:
        version_publish(bundle=support, content=forged, message="m", actor=ops.actor)
    document, _ = bundle_export(bundle=support, actor=ops.actor)
    _, canonical, digest = canonicalise(forged)
    document = {**document, "name": "support-copy", "labels": []}
    document["versions"] = [{**document["versions"][0], "content_hash": digest}]
    with pytest.raises(InvalidContent) as imported:
        bundle_import(document=document, objects={digest: canonical}, actor=ops.actor)
    assert imported.value.details == published.value.details
    assert "content.system_prompt" in imported.value.details
    assert not Bundle.objects.filter(name="support-copy").exists()
    assert not Include.objects.filter(bundle__name="support-copy").exists()


@pytest.mark.parametrize(
    "change, where",
    [
        ({"includes": None}, "content.includes"),
        ({"system_prompt_source": "no marker"}, "content.system_prompt_source"),
        ({"includes": [{"marker": "{{> tone@production}}", "bundle": "other"}]}, "content.includes[0]"),
        ({"system_prompt_source": "{{> tone@2}}"}, "content.includes[0]"),
    ],
)
def test_stored_fields_that_disagree_with_each_other_are_a_400(support, tone_v1, ops, change, where):
    doc = {**stored(publish(support, ops.actor, SOURCE)), **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    with pytest.raises(InvalidContent) as caught:
        version_publish(bundle=support, content=doc, message="m", actor=ops.actor)
    assert where in caught.value.details


# The admin: the editor starts from the source, the check resolves, the diff shows includes -----------------


@pytest.fixture
def engineer(db):
    from adminui.groups import PROMPT_ENGINEERS
    from tests.adminui.test_adminui_views import client_for, make_user

    return client_for(make_user("pat", PROMPT_ENGINEERS))


def test_the_admin_check_and_diff_show_what_publishing_resolves(engineer, support, tone, tone_v1, ops):
    from knowledge.render import build_prefix
    from tests.adminui.test_adminui_views import u, words

    publish(support, ops.actor, SOURCE)
    page = engineer.get(u("adminui_version_new", "support", query="from=1"))
    form = page.context["form"]
    data = {name: form[name].value() or "" for name in form.fields} | {"message": ""}
    assert data["system_prompt"] == SOURCE
    checked = engineer.post(u("adminui_version_new", "support"), data | {"check": "Check against v1"})
    verdict = checked.context["verdict"]
    resolved = stored(BundleVersion.objects.get(bundle=support, number=1))
    assert verdict.prefix_bytes == len(build_prefix(resolved, {}, {}).body)
    tone_v2 = publish(tone, ops.actor, TONE_2)
    label_move(bundle=tone, name="production", version=tone_v2, actor=ops.actor, reason="warmer")
    published = engineer.post(u("adminui_version_new", "support"), data | {"message": "pick up tone 2"})
    assert published.status_code == 302
    assert TONE_2 in stored(BundleVersion.objects.get(bundle=support, number=2))["system_prompt"]
    diff = engineer.get(u("adminui_diff", "support", query="old=1&new=2"))
    assert "tone@production moved from version 1" in words(diff)


def test_moving_the_snippet_s_label_lists_who_would_pick_it_up(support, tone, tone_v1, ops):
    publish(support, ops.actor, SOURCE)
    publish(support, ops.actor, "Pinned: {{> tone@1}}")  # the latest version includes tone by number only
    other = bundle_create(name="other", actor=ops.actor)
    publish(other, ops.actor, "Other. {{> tone@production}}")
    publish(tone, ops.actor, TONE_2)
    moved = ops.put("/api/v1/bundles/tone/labels/production/", {"version": 2, "reason": "warmer"})
    assert moved.status_code == 200, moved.json()
    assert [
        (d["bundle"], d["pinned_version"], d["current_version"], d["outdated"]) for d in moved.json()["dependents"]
    ] == [("other", 1, 2, True)]
    staged = ops.put("/api/v1/bundles/tone/labels/staging/", {"version": 2, "reason": "stage"})
    assert staged.status_code == 201 and staged.json()["dependents"] == []


def test_an_entry_s_version_must_fit_a_version_number(support, tone_v1, ops):
    doc = stored(publish(support, ops.actor, SOURCE))
    doc["includes"][0]["version"] = 2**31
    with pytest.raises(InvalidContent) as caught:
        version_publish(bundle=support, content=doc, message="m", actor=ops.actor)
    assert caught.value.details["content.includes[0]"] == ["version must be a version number."]


# Include edges: who includes a snippet, at the same cost at any history ------------------------------------


def edges(bundle: Bundle) -> list[tuple[int, int, str, str, int | None, int, bool]]:
    return list(
        Include.objects.filter(bundle=bundle)
        .order_by("version__number", "position")
        .values_list("version__number", "position", "marker", "label", "number", "pinned_version", "current")
    )


def test_a_publish_records_its_include_edges_and_only_the_latest_version_s_are_current(support, tone_v2, ops):
    publish(support, ops.actor, "{{> tone@production}} {{> tone@2}} {{> tone@production}}")
    assert edges(support) == [
        (1, 0, "{{> tone@production}}", "production", None, 1, True),
        (1, 1, "{{> tone@2}}", "", 2, 2, True),
    ]
    assert Include.objects.get(bundle=support, position=1).pinned_hash == tone_v2.content_hash
    publish(support, ops.actor, "No snippet any more.")
    assert [edge[-1] for edge in edges(support)] == [False, False]
    publish(support, ops.actor, "{{> tone@2}}")
    assert [(edge[0], edge[-1]) for edge in edges(support)] == [(1, False), (1, False), (3, True)]


def test_an_idempotent_publish_writes_no_edges(support, tone_v1, ops):
    publish(support, ops.actor, SOURCE)
    publish(support, ops.actor, SOURCE)
    assert [(edge[0], edge[-1]) for edge in edges(support)] == [(1, True)]


def test_a_newer_version_without_edges_hides_the_older_one_s(support, tone_v1, ops):
    """During an upgrade the previous release publishes too, and writes no edges: its version is
    still the latest, so the bundle no longer includes the snippet though the edges say current."""
    publish(support, ops.actor, SOURCE)
    _, data, digest = canonicalise(content("Published by the previous release."))
    BundleVersion.objects.create(bundle=support, number=2, canonical=data, content_hash=digest, message="m", author="a")
    assert Include.objects.filter(bundle=support, current=True).count() == 1
    assert bundles_including(bundle_name="tone") == []


def test_a_label_named_only_with_digits_has_no_dependents(support, tone, tone_v2, ops):
    """`{{> tone@2}}` is version 2, whatever a label named `2` points at."""
    publish(support, ops.actor, "{{> tone@2}}")
    moved = ops.put("/api/v1/bundles/tone/labels/2/", {"version": 1, "reason": "a label named 2"})
    assert moved.status_code == 201, moved.json()
    assert moved.json()["dependents"] == []
    assert [d["marker"] for d in bundles_including(bundle_name="tone")] == ["{{> tone@2}}"]


def _queries(call: Any) -> tuple[int, Any]:
    with CaptureQueriesContext(connection) as queries:
        response = call()
    assert response.status_code in (200, 201), response.json()
    return len(queries.captured_queries), response


def test_the_label_move_and_the_snippet_publish_cost_the_same_at_any_history(support, tone, tone_v1, ops, publisher):
    """Issue 20: history never slows the rollback path. Other bundles, the snippet's versions and the
    including bundle's own versions all grow thirty-fold; the move and the publish that answer with
    the dependents make the same queries."""
    publish(support, ops.actor, SOURCE)
    extra = iter(range(1, 1000))

    def move(to: int) -> tuple[int, Any]:
        body = {"version": to, "reason": "roll"}
        return _queries(lambda: ops.put("/api/v1/bundles/tone/labels/production/", body))

    def publish_snippet() -> tuple[int, Any]:
        body = {"content": content(f"Tone, take {next(extra)}."), "message": "m"}
        return _queries(lambda: publisher.post("/api/v1/bundles/tone/versions/", body))

    publish_snippet()
    move(2)  # the label's first move, and one more, so both measured moves find a label with a history
    before = move(1), publish_snippet()
    for i in range(30):
        other = bundle_create(name=f"other{i}", actor=ops.actor)
        publish(other, ops.actor, f"Other {i}.")
        publish(tone, ops.actor, f"Tone {i}.")
        publish(support, ops.actor, f"{SOURCE} ({i})")  # each version includes tone@production
    after = move(3), publish_snippet()
    assert [count for count, _ in after] == [count for count, _ in before]
    assert [d["bundle"] for d in after[0][1].json()["dependents"]] == ["support"]
    assert after[0][1].json()["dependents"][0]["version"] == 31
    assert [d["bundle"] for d in after[1][1].json()["dependents"]] == ["support"]


HISTORY = 30


def test_who_includes_a_snippet_is_read_over_the_partial_index_of_latest_versions(support, tone, tone_v1, ops):
    for i in range(HISTORY):  # the including bundle's history: versions that include tone
        publish(support, ops.actor, f"{SOURCE} ({i})")
    former = bundle_create(name="former", actor=ops.actor)
    publish(former, ops.actor, SOURCE)
    publish(former, ops.actor, "No longer includes tone.")
    for label in (None, "production"):
        with CaptureQueriesContext(connection) as queries:
            assert [d["version"] for d in bundles_including(bundle_name="tone", label=label)] == [HISTORY]
        [sql] = [q["sql"] for q in queries.captured_queries]
        with connection.cursor() as cursor:
            # On tiny tables the planner rightly prefers sequential scans (tests/sessions_app/test_flat_counts.py);
            # with stale statistics and a handful of versions it also once walked every version and
            # probed its edges (CI): statistics first, and enough history to make that the dear plan.
            cursor.execute("ANALYZE registry_bundle, registry_bundleversion, registry_include")
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Seq Scan" not in plan, plan
        # Only the edges of latest versions are read: each probe of the edges finds at most one
        # row and drops none (history would show as rows read and removed by a filter). Which
        # index the planner takes on these tiny tables varies from run to run; this does not.
        lines = plan.splitlines()
        scans = [i for i, line in enumerate(lines) if " on registry_include" in line]
        assert scans, plan
        for i in scans:
            assert re.search(r"\(actual rows=[01] loops=\d+\)", lines[i]), plan
            node = lines[i + 1 : next((j for j in range(i + 1, len(lines)) if "->" in lines[j]), len(lines))]
            assert not any("Rows Removed by Filter" in line for line in node), plan


def test_the_migration_backfills_the_edges_from_the_stored_versions(support, tone, tone_v2, ops):
    import importlib

    backfill = importlib.import_module("registry.migrations.0012_backfill_includes")
    publish(support, ops.actor, "{{> tone@production}} and {{> tone@2}}")
    publish(support, ops.actor, "Plain, with a literal key: includes.")
    publish(support, ops.actor, SOURCE)
    greeting = bundle_create(name="greeting", actor=ops.actor)
    publish(greeting, ops.actor, "Hi! {{> support@3}}")
    written = {bundle.name: edges(bundle) for bundle in (support, greeting)}
    hashes = sorted(Include.objects.values_list("pinned_hash", "snippet_id"))
    Include.objects.all().delete()  # as before the edges existed
    backfill.VERSION_CHUNK = 2  # several chunks
    backfill.backfill(None, connection.schema_editor())
    backfill.backfill(None, connection.schema_editor())  # a retry adds nothing
    assert {bundle.name: edges(bundle) for bundle in (support, greeting)} == written
    assert sorted(Include.objects.values_list("pinned_hash", "snippet_id")) == hashes
