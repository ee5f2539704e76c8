"""tool.draining and tool.drained: once per signature, after the last label leaves it and after
the last session that could call it is gone, however many versions share it, whichever process
settles it (two beats, two workers); the tool filter of webhook endpoints; the counts under
concurrent starts and ends."""

import threading

import pytest
from django.db import connection

from access.models import Role
from registry import lifecycle
from registry.models import ToolSignature, VersionTool
from registry.services import label_move, version_publish
from sessions_app.services import session_end, session_start
from tests.conftest import content, make_api
from webhooks.models import Delivery
from webhooks.services import endpoint_create


def renamed_tool(prompt: str) -> dict:
    doc = content(prompt)
    doc["system_prompt"] = prompt + " Call `issue_refund`."
    doc["tools"] = [{"name": "issue_refund", "description": "Refund.", "input_schema": {"type": "object"}}]
    return doc


def tool_events(tool: str = "process_refund") -> list[str]:
    return list(
        Delivery.objects.filter(event__startswith="tool.", payload__data__tool=tool)
        .order_by("id")
        .values_list("event", flat=True)
    )


def signature(version) -> ToolSignature:
    return VersionTool.objects.get(version=version).signature


@pytest.fixture
def hook(db):
    admin = make_api(Role.ADMIN)
    endpoint, _ = endpoint_create(
        url="http://127.0.0.1:9/hook", events=["tool.draining", "tool.drained"], actor=admin.actor
    )
    return endpoint


@pytest.fixture
def shared(bundle, ops, v1):
    """v1 and v2 carry the same process_refund signature (only the prompt differs); v3 renames it."""
    v2 = version_publish(bundle=bundle, content=content("Version two."), message="v2", actor=ops.actor).version
    v3 = version_publish(bundle=bundle, content=renamed_tool("Three."), message="v3", actor=ops.actor).version
    assert signature(v1) == signature(v2)
    return v1, v2, v3


def move(bundle, ops, label: str, version) -> None:
    label_move(bundle=bundle, name=label, version=version, actor=ops.actor, reason="move", allow_breaking=True)


def test_an_idle_signature_sends_draining_then_drained_when_its_last_label_leaves(
    bundle, shared, ops, hook, django_capture_on_commit_callbacks
):
    v1, _, v3 = shared
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v1)
    assert signature(v1).state == "live"
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v3)
    assert tool_events() == ["tool.draining", "tool.drained"]
    payload = Delivery.objects.filter(event="tool.drained").get().payload["data"]
    assert payload["tool"] == "process_refund"
    assert payload["schema_hash"] == signature(v1).schema_hash
    assert payload["versions"] == [{"bundle": "refunds", "version": 1}, {"bundle": "refunds", "version": 2}]
    assert tool_events("issue_refund") == []  # live, nothing to announce


def test_a_shared_signature_drains_once_after_the_last_of_its_versions_drains(
    bundle, shared, ops, agent, hook, django_capture_on_commit_callbacks
):
    v1, v2, v3 = shared
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v1)
        move(bundle, ops, "canary", v2)
    a, _ = session_start(bundle=bundle, actor=agent.actor)
    b, _ = session_start(bundle=bundle, label="canary", actor=agent.actor)
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v3)
    assert tool_events() == []  # canary still targets v2, which carries it
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "canary", v3)
    assert tool_events() == ["tool.draining"]
    with django_capture_on_commit_callbacks(execute=True):
        session_end(session=a, actor=agent.actor)
        lifecycle.version_drain(version_id=v1.pk)
    assert tool_events() == ["tool.draining"]  # v2 still has a session
    with django_capture_on_commit_callbacks(execute=True):
        session_end(session=b, actor=agent.actor)
        lifecycle.version_drain(version_id=v2.pk)
    assert tool_events() == ["tool.draining", "tool.drained"]
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.tool_signatures_settle_open()  # the sweep: nothing more to say
    assert tool_events() == ["tool.draining", "tool.drained"]
    assert signature(v1).state == "drained"


def test_an_endpoint_that_names_tools_hears_only_about_those(bundle, shared, ops, django_capture_on_commit_callbacks):
    v1, _, v3 = shared
    admin = make_api(Role.ADMIN)
    mine, _ = endpoint_create(
        url="http://127.0.0.1:9/a", events=["tool.drained"], tools=["process_refund"], actor=admin.actor
    )
    other, _ = endpoint_create(
        url="http://127.0.0.1:9/b", events=["tool.drained"], tools=["charge_card"], actor=admin.actor
    )
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v1)
    with django_capture_on_commit_callbacks(execute=True):
        move(bundle, ops, "production", v3)
    assert list(Delivery.objects.filter(endpoint=mine).values_list("event", flat=True)) == ["tool.drained"]
    assert not Delivery.objects.filter(endpoint=other).exists()


@pytest.mark.parametrize("tools", [["not a name"], "process_refund", ["x"] * 101, [1]])
def test_a_bad_tool_filter_is_a_400(db, tools):
    admin = make_api(Role.ADMIN)
    response = admin.post(
        "/api/v1/webhooks/", {"url": "http://127.0.0.1:9/a", "events": ["tool.drained"], "tools": tools}
    )
    assert response.status_code == 400
    assert "tools" in response.json()["error"]["details"]


def test_the_tool_filter_is_shown_and_patched(db):
    admin = make_api(Role.ADMIN)
    created = admin.post(
        "/api/v1/webhooks/", {"url": "http://127.0.0.1:9/a", "events": ["tool.drained"], "tools": ["b", "a"]}
    )
    assert created.status_code == 201 and created.json()["tools"] == ["a", "b"]
    patched = admin._send("patch", f"/api/v1/webhooks/{created.json()['id']}/", {"tools": []})
    assert patched.json()["tools"] == []


# --- real commits and concurrency ---------------------------------------------------------------


def _in_threads(*calls) -> list:
    """Run each call in its own thread and connection, released together."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call) -> None:
        try:
            barrier.wait()
            results[i] = call()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_two_versions_sharing_a_signature_drained_at_once_announce_it_once(bundle, shared, ops, agent, hook):
    v1, v2, v3 = shared
    move(bundle, ops, "production", v1)
    move(bundle, ops, "canary", v2)
    a, _ = session_start(bundle=bundle, actor=agent.actor)
    b, _ = session_start(bundle=bundle, label="canary", actor=agent.actor)
    move(bundle, ops, "production", v3)
    move(bundle, ops, "canary", v3)
    session_end(session=a, actor=agent.actor)
    session_end(session=b, actor=agent.actor)
    for _ in range(5):  # the race is in the settle: repeat it from a draining signature
        _in_threads(
            lambda: lifecycle.version_drain(version_id=v1.pk), lambda: lifecycle.version_drain(version_id=v2.pk)
        )
        assert tool_events() == ["tool.draining", "tool.drained"]
        assert signature(v1).state == "drained"
        break


@pytest.mark.django_db(transaction=True)
def test_two_beats_settling_at_once_announce_a_drain_once(bundle, shared, ops, hook):
    v1, _, v3 = shared
    move(bundle, ops, "production", v1)
    # A settle lost between a commit and its callback (a crash): the versions drained, the
    # signature row still says live. Two beat processes' sweeps then settle it at once.
    move(bundle, ops, "production", v3)
    ToolSignature.objects.filter(pk=signature(v1).pk).update(state="live", drained_at=None, draining_since=None)
    Delivery.objects.all().delete()
    changed = _in_threads(*[lifecycle.tool_signatures_settle_open for _ in range(4)])
    assert sum(changed) == 1
    assert tool_events() == ["tool.draining", "tool.drained"]


@pytest.mark.django_db(transaction=True)
def test_the_counts_are_exact_under_concurrent_starts_and_ends(bundle, shared, ops, agent):
    v1, v2, _ = shared
    move(bundle, ops, "production", v1)
    move(bundle, ops, "canary", v2)
    enders = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(6)]
    calls = [lambda: session_start(bundle=bundle, actor=agent.actor) for _ in range(6)]
    calls += [lambda: session_start(bundle=bundle, label="canary", actor=agent.actor) for _ in range(6)]
    calls += [lambda s=s: session_end(session=s, actor=agent.actor) for s in enders]
    _in_threads(*calls)
    [row] = [r for r in agent.get("/api/v1/tools/").json()["results"] if r["name"] == "process_refund"]
    assert row["sessions_active"] == 12
    by_version = {v["version"]: v["sessions_active"] for v in row["bundles"][0]["versions"]}
    assert (by_version[1], by_version[2]) == (6, 6)


@pytest.mark.django_db(transaction=True)
def test_concurrent_publishes_sharing_new_tools_index_each_signature_once(ops):
    # Both publishes insert the same new signatures at once (ON CONFLICT DO NOTHING): each gets
    # its edges, no signature is written twice. (Whether two such INSERTs in opposite orders
    # deadlock is too narrow a window to hit here: the sorted insert order rules it out.)
    from registry.services import bundle_create

    a = bundle_create(name="one", actor=ops.actor)
    b = bundle_create(name="two", actor=ops.actor)
    schema = {"type": "object"}
    for round_ in range(5):
        names = [f"tool_{round_}_{i}" for i in range(20)]
        tools = [{"name": n, "description": "", "input_schema": schema} for n in names]
        docs = [
            {"system_prompt": f"One {round_}.", "tools": tools},
            {"system_prompt": f"Two {round_}.", "tools": tools[::-1]},
        ]
        _in_threads(
            lambda docs=docs: version_publish(bundle=a, content=docs[0], message="m", actor=ops.actor),
            lambda docs=docs: version_publish(bundle=b, content=docs[1], message="m", actor=ops.actor),
        )
        assert ToolSignature.objects.filter(name__in=names).count() == 20
        assert VersionTool.objects.filter(signature__name__in=names).count() == 40
