"""Issue 41: the model catalog, and what happens around a model's retirement date. Every test
sets the catalog's clock (settings.MODEL_CLOCK_NOW, modelcatalog.clock) instead of sleeping."""

import json
import threading
from datetime import date

import pytest
from django.core.management import call_command
from django.db import connection

from access.actors import SYSTEM
from access.models import Role
from audit.models import AuditEvent
from modelcatalog import selectors as catalog
from modelcatalog.models import RetirementNotice
from modelcatalog.services import retirement_notices_send
from registry import parsed_content
from registry.models import Label
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from sessions_app.services import session_start
from tests.conftest import content, make_api
from tests.edge.test_fastlane import _close_pool_connections, _same, both  # noqa: F401 (the fixture is autouse)
from webhooks.models import Delivery
from webhooks.services import endpoint_create

BEFORE = "2026-11-01T12:00:00+00:00"  # gpt-5 retires 2026-12-11: 40 days out
WITHIN = "2026-11-20T12:00:00+00:00"  # 21 days out: inside the 30-day window
AFTER = "2026-12-11T00:00:00+00:00"  # the date itself: retired


def publish(api, name: str, model: dict, prompt: str = ""):
    body = {"content": content(prompt or f"Prompt for {model}.", model=model), "message": "m"}
    return api.post(f"/api/v1/bundles/{name}/versions/", body)


@pytest.fixture
def gpt5(settings, ops, bundle):
    """refunds v1 on gpt-5 (published before the window), `production` on it."""
    settings.MODEL_CLOCK_NOW = BEFORE
    v1 = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="v1", actor=ops.actor)
    label_move(bundle=bundle, name="production", version=v1.version, actor=ops.actor, reason="ship")
    return v1.version


# --- the catalog's data ---------------------------------------------------------------------------


def test_every_fact_the_catalog_ships_has_a_source_with_the_date_it_was_read(db):
    models = catalog.shipped()
    assert len({(m.provider, m.name) for m in models}) == len(models)
    for model in models:
        for fact in catalog.FACTS:
            value = getattr(model, fact)
            if value in (None, ()):
                continue
            source = model.source_of(fact)
            assert source is not None, (model.name, fact)
            assert source.url.startswith("https://"), (model.name, fact)
            date.fromisoformat(source.read)
        if model.replacement:
            assert catalog.model_get(provider=None, name=model.replacement) is not None, model.replacement


@pytest.mark.parametrize(
    ("name", "retires_at", "replacement"),
    [
        ("gpt-5", "2026-12-11", "gpt-6.1-sol"),
        ("gpt-5-mini-2025-08-07", "2026-12-11", "gpt-6.1-terra"),
        ("gpt-5-nano", "2026-12-11", "gpt-6-luna"),
        # OpenAI's GPT-4 series notice dates the dated snapshots; the bare aliases take their date.
        ("gpt-4o-2024-11-20", "2027-01-14", "gpt-6-luna"),
        ("gpt-4.1-2025-04-14", "2027-01-14", "gpt-6-luna"),
        ("gpt-4o", "2027-01-14", "gpt-6-luna"),
        ("claude-sonnet-4-5", "2026-11-30", "claude-sonnet-5-5"),
        ("claude-opus-4-1-20250805", "2026-08-05", "claude-opus-4-8"),
        ("claude-opus-4-5", "2027-01-22", "claude-opus-5-5"),
        ("claude-3-haiku-20240307", "2026-04-20", "claude-haiku-4-5"),
        # Bedrock keeps its own schedule: a Bedrock id never takes the Claude API's dates.
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", None, None),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", "2026-10-14", None),
        ("models/gemini-2.5-pro", "2026-12-01", "gemini-3.8-flash"),
        ("claude-sonnet-4-6", None, None),
    ],
)
def test_the_catalog_knows_the_announced_dates_by_name_or_alias(db, name, retires_at, replacement):
    found = catalog.model_get(provider=None, name=name)
    assert found is not None
    assert (found.retires_at.isoformat() if found.retires_at else None) == retires_at
    assert found.replacement == replacement


def test_the_models_list_answers_every_model_with_its_sources(agent):
    answer = agent.get("/api/v1/models/").json()["results"]
    sonnet = next(m for m in answer if m["name"] == "claude-sonnet-4-5")
    assert sonnet["retires_at"] == "2026-11-30" and sonnet["retired"] is True
    assert sonnet["sources"]["retires_at"]["url"].startswith("https://platform.claude.com/")
    assert sonnet["aliases"] == ["claude-sonnet-4-5-20250929"]
    assert {"input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok"} <= set(sonnet)


# --- publish --------------------------------------------------------------------------------------


def test_it_refuses_to_publish_a_retired_model_naming_the_replacement(publisher, bundle):
    for name in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"):
        response = publish(publisher, "refunds", {"name": name})
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "model_retired"
        assert error["details"]["replacement"] == "claude-sonnet-5-5" and "claude-sonnet-5-5" in error["message"]
    assert not bundle.versions.exists()


def test_an_unknown_model_is_a_warning_in_the_answer_not_an_error(publisher, bundle):
    response = publish(publisher, "refunds", {"name": "house-model-7"})
    assert response.status_code == 201
    answer = response.json()
    assert answer["model"] == {"name": "house-model-7", "catalog": None}
    assert [w["path"] for w in answer["warnings"]] == ["content.model.name"]


def test_an_alias_is_resolved_for_display_and_never_rewritten_in_the_content(settings, publisher, bundle):
    settings.MODEL_CLOCK_NOW = BEFORE
    response = publish(publisher, "refunds", {"name": "gpt-5-2025-08-07"})
    assert response.status_code == 201
    answer = response.json()
    assert answer["model"]["catalog"]["name"] == "gpt-5" and answer["model"]["name"] == "gpt-5-2025-08-07"
    assert answer["content"]["model"]["name"] == "gpt-5-2025-08-07"
    assert answer["warnings"] == []  # 40 days out: not retiring yet
    settings.MODEL_CLOCK_NOW = WITHIN
    warned = publish(publisher, "refunds", {"name": "gpt-5"}, prompt="Another.").json()["warnings"]
    assert any("retires on 2026-12-11" in w["message"] for w in warned)


# --- moves ----------------------------------------------------------------------------------------


def test_a_move_to_a_version_whose_model_retires_soon_needs_allow_retiring(settings, ops, bundle, gpt5):
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "gpt-4o"}), message="v2", actor=ops.actor
    )
    label_move(bundle=bundle, name="production", version=v2.version, actor=ops.actor, reason="to 4o")
    settings.MODEL_CLOCK_NOW = WITHIN
    path = "/api/v1/bundles/refunds/labels/production/"
    refused = ops.put(path, {"version": 1, "reason": "back to gpt-5"})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "model_retiring"
    assert error["details"]["versions"] == [
        {"version": 1, "model": "gpt-5", "retires_at": "2026-12-11", "replacement": "gpt-6.1-sol"}
    ]
    moved = ops.put(path, {"version": 1, "reason": "a week of traffic before we migrate", "allow_retiring": True})
    assert moved.status_code == 200, moved.content
    history = ops.get(path + "history/").json()["results"][0]
    assert history["reason"] == "a week of traffic before we migrate"
    assert "gpt-5 retires on 2026-12-11 (allow_retiring)" in json.dumps(history)


def test_a_rollback_to_such_a_version_gets_the_same_question(settings, ops, bundle, gpt5):
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "gpt-4o"}), message="v2", actor=ops.actor
    )
    label_move(bundle=bundle, name="production", version=v2.version, actor=ops.actor, reason="to 4o")
    settings.MODEL_CLOCK_NOW = WITHIN
    path = "/api/v1/bundles/refunds/labels/production/rollback/"
    refused = ops.post(path, {"reason": "4o misbehaves"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_retiring"
    assert ops.post(path, {"reason": "4o misbehaves", "allow_retiring": True}).status_code == 200
    assert Label.objects.get(name="production").version_id == gpt5.pk


def test_a_move_to_a_retired_model_is_refused_even_with_allow_retiring(settings, ops, bundle, gpt5):
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "gpt-4o"}), message="v2", actor=ops.actor
    )
    label_move(bundle=bundle, name="production", version=v2.version, actor=ops.actor, reason="to 4o")
    settings.MODEL_CLOCK_NOW = AFTER
    body = {"version": 1, "reason": "back", "allow_retiring": True}
    refused = ops.put("/api/v1/bundles/refunds/labels/production/", body)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_retired"


# --- sessions -------------------------------------------------------------------------------------


def test_a_session_start_on_a_retired_model_is_409_with_the_labels(settings, ops, agent, bundle, gpt5):
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "gpt-4o"}), message="v2", actor=ops.actor
    )
    label_move(bundle=bundle, name="staging", version=v2.version, actor=ops.actor, reason="try 4o")
    settings.MODEL_CLOCK_NOW = AFTER
    for body in ({"bundle": "refunds"}, {"bundle": "refunds", "version": 1}):
        response = agent.post("/api/v1/sessions/", body)
        assert response.status_code == 409, response.content
        error = response.json()["error"]
        assert error["code"] == "model_retired"
        assert error["details"]["labels"] == {"production": 1, "staging": 2}
        assert error["details"]["replacement"] == "gpt-6.1-sol"
    assert agent.post("/api/v1/sessions/", {"bundle": "refunds", "label": "staging"}).status_code == 201
    assert Session.objects.count() == 1


def test_a_pinned_session_hears_of_the_date_then_gets_410(settings, ops, agent, bundle, gpt5):
    settings.MODEL_CLOCK_NOW = WITHIN
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    turn = agent.post(f"/api/v1/sessions/{session}/turn/", {"messages": [{"role": "user", "content": "hi"}]})
    assert turn.status_code == 200, turn.content
    (notice,) = [n for n in turn.json()["notices"] if n["path"] == "model"]
    assert notice["retires_at"] == "2026-12-11" and notice["replacement"] == "gpt-6.1-sol"
    assert agent.get(f"/api/v1/sessions/{session}/bundle/").status_code == 200
    settings.MODEL_CLOCK_NOW = AFTER
    for response in (
        agent.get(f"/api/v1/sessions/{session}/bundle/"),
        agent.post(f"/api/v1/sessions/{session}/turn/", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        assert response.status_code == 410, response.content
        error = response.json()["error"]
        assert error["code"] == "model_retired" and error["details"]["labels"] == {"production": 1}
    assert agent.post(f"/api/v1/sessions/{session}/end/").status_code == 200  # ending still works


def test_a_process_that_never_read_the_version_finds_its_model(settings, ops, agent, bundle, gpt5):
    # A fresh web process: neither the model cache nor the documents hold the version yet, and
    # the session start and the fetch read it from stand-ins of a few columns.
    parsed_content._MODELS.clear()
    parsed_content._NAMES.clear()
    parsed_content._load.cache_clear()
    settings.MODEL_CLOCK_NOW = WITHIN
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds"})
    assert session.status_code == 201, session.content
    parsed_content._MODELS.clear()
    parsed_content._NAMES.clear()
    parsed_content._load.cache_clear()
    settings.MODEL_CLOCK_NOW = AFTER
    fetched = agent.get(f"/api/v1/sessions/{session.json()['id']}/bundle/")
    assert fetched.status_code == 410 and fetched.json()["error"]["code"] == "model_retired"


def test_a_model_unknown_to_the_catalog_never_blocks_anything(settings, ops, agent, bundle, v1, production):
    settings.MODEL_CLOCK_NOW = "2040-01-01T00:00:00+00:00"
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]  # m-1: unknown
    assert agent.get(f"/api/v1/sessions/{session}/bundle/").status_code == 200


# --- ops' corrections -----------------------------------------------------------------------------


def test_ops_correct_the_catalog_audited_and_the_checks_follow_at_once(settings, ops, publisher, agent, bundle):
    settings.MODEL_CLOCK_NOW = BEFORE
    path = "/api/v1/models/acme/house-model-7/"
    body = {
        "facts": {"retires_at": "2026-11-15", "replacement": "house-model-8", "cache_floor_tokens": 2048},
        "source": {"url": "https://acme.example/models", "read": "2026-10-30"},
        "reason": "our provider told us",
    }
    assert publisher.put(path, body).status_code == 403
    answer = ops.put(path, body)
    assert answer.status_code == 200, answer.content
    assert answer.json()["sources"]["retires_at"] == {"url": "https://acme.example/models", "read": "2026-10-30"}
    event = AuditEvent.objects.get(action="model.updated")
    assert event.target == "acme/house-model-7" and event.reason == "our provider told us"
    assert publish(publisher, "refunds", {"name": "house-model-7"}).status_code == 201
    settings.MODEL_CLOCK_NOW = WITHIN
    refused = publish(publisher, "refunds", {"name": "house-model-7"}, prompt="Again.")
    assert refused.status_code == 400 and refused.json()["error"]["details"]["replacement"] == "house-model-8"


@pytest.mark.parametrize(
    "body",
    [
        {"facts": {"retires_at": "next week"}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"retires_at": "2026-02-30"}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"input_per_mtok": "cheap"}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"input_per_mtok": 1e300}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"context_window": True}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"colour": "blue"}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"aliases": ["a/b"]}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"aliases": ["x"] * 51}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"retires_at": "2026-12-01"}, "source": {"url": "https://x.example"}},
        {"facts": {"retires_at": "2026-12-01"}, "source": {"url": "x" * 3000, "read": "2026-10-30"}},
        {"facts": {"retires_at": "2026-12-01"}, "source": {"url": "javascript:alert(1)", "read": "2026-10-30"}},
        {"facts": {}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {"facts": {"replacement": "m"}, "source": {"url": "https://x.example", "read": "2026-10-30"}},
        {
            "facts": {"retires_at": "2026-12-01"},
            "source": {"url": "https://x.example", "read": "2026-10-30"},
            "reason": "",
        },
        {"facts": ["retires_at"], "source": {"url": "https://x.example", "read": "2026-10-30"}},
    ],
)
def test_hostile_catalog_writes_get_a_clear_400(ops, body):
    body = {"reason": "r", **body}
    response = ops.put("/api/v1/models/acme/m/", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"


def test_models_import_reads_openais_model_list(settings, tmp_path, db):
    settings.MODEL_CLOCK_NOW = BEFORE
    listing = {
        "object": "list",
        "data": [
            {"id": "gpt-5", "object": "model", "owned_by": "openai", "shutdown_date": "2026-12-18"},
            {"id": "gpt-6.1-sol", "object": "model", "owned_by": "openai", "shutdown_date": None},
            {"id": "gpt-7-preview", "object": "model", "owned_by": "openai"},
        ],
    }
    path = tmp_path / "openai-models.json"
    path.write_text(json.dumps(listing))
    call_command("models_import", str(path), "--dry-run")
    assert catalog.model_get(provider=None, name="gpt-5").retires_at == date(2026, 12, 11)
    call_command("models_import", str(path), "--reason", "refresh from the provider")
    assert catalog.model_get(provider=None, name="gpt-5").retires_at == date(2026, 12, 18)
    assert catalog.model_get(provider=None, name="gpt-5").source_of("retires_at").url == "file:openai-models.json"
    assert catalog.model_get(provider="openai", name="gpt-7-preview") is not None
    assert AuditEvent.objects.filter(action="model.updated").count() == 2


# --- the retiring view ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_retiring_view_counts_labels_and_sessions_under_concurrency(settings):
    settings.MODEL_CLOCK_NOW = BEFORE
    ops = make_api(Role.OPS, name="t-ops")
    agents = [make_api(Role.AGENT, name=f"t-agent-{i}") for i in range(4)]
    bundle = bundle_create(name="refunds", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="v1", actor=SYSTEM).version
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "claude-sonnet-4-6"}), message="v2", actor=SYSTEM
    ).version
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="ship")
    label_move(bundle=bundle, name="canary", targets=[(v1, 50), (v2, 50)], actor=SYSTEM, reason="try")
    errors: list[BaseException] = []

    def start(agent, n: int) -> None:
        try:
            for i in range(n):
                session_start(bundle=bundle, actor=agent.actor, routing_key=f"{agent.actor.name}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(agent, 10)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    settings.MODEL_CLOCK_NOW = WITHIN
    answer = ops.get("/api/v1/models/retiring/?within=30d").json()
    gpt = next(m for m in answer["models"] if m["model"]["name"] == "gpt-5")
    (row,) = gpt["versions"]
    assert row["version"] == 1 and row["active_sessions"] == 40 == gpt["active_sessions"]
    assert row["labels"] == [{"label": "canary", "weight": 50}, {"label": "production", "weight": 100}]
    assert gpt["labels"] == 2 and gpt["days_left"] == 20
    assert all(m["model"]["name"] != "claude-sonnet-4-6" for m in answer["models"])
    assert ops.get("/api/v1/models/retiring/?within=soon").status_code == 400
    assert make_api(Role.AGENT, name="t-a").get("/api/v1/models/retiring/").status_code == 403


# --- webhooks -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_retirement_webhooks_fire_once_per_threshold_even_with_two_beat_processes(settings):
    endpoint_create(url="http://127.0.0.1:9/hook", events=["model.retiring", "model.retired"], actor=SYSTEM)
    RetirementNotice.objects.all().delete()

    def two_beats() -> None:
        barrier = threading.Barrier(2)

        def beat() -> None:
            try:
                barrier.wait()
                retirement_notices_send()
            finally:
                connection.close()

        threads = [threading.Thread(target=beat) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def gpt5_events() -> list[tuple[str, str]]:
        rows = Delivery.objects.filter(payload__data__model="gpt-5").order_by("id")
        return [(d.event, d.payload["data"]["threshold"]) for d in rows]

    settings.MODEL_CLOCK_NOW = "2026-10-01T00:00:00+00:00"  # 71 days out: nothing yet
    two_beats()
    assert gpt5_events() == []
    for now in ["2026-11-12T00:00:00+00:00", "2026-11-20T00:00:00+00:00", "2026-12-04T01:00:00+00:00"]:
        settings.MODEL_CLOCK_NOW = now
        two_beats()
        two_beats()
    settings.MODEL_CLOCK_NOW = "2026-12-10T01:00:00+00:00"
    two_beats()
    settings.MODEL_CLOCK_NOW = "2026-12-11T00:00:00+00:00"
    two_beats()
    two_beats()
    assert gpt5_events() == [
        ("model.retiring", "window"),
        ("model.retiring", "7d"),
        ("model.retiring", "1d"),
        ("model.retired", "retired"),
    ]
    first = Delivery.objects.filter(payload__data__model="gpt-5").order_by("id").first()
    assert first.payload["data"]["retires_at"] == "2026-12-11" and first.payload["data"]["days_left"] == 29
    assert first.payload["data"]["replacement"] == "gpt-6.1-sol"


# --- derive ---------------------------------------------------------------------------------------


def test_derive_publishes_the_same_content_on_the_new_model(settings, publisher, ops, bundle):
    settings.MODEL_CLOCK_NOW = BEFORE
    doc = content(model={"name": "gpt-5", "temperature": 0.2, "seed": 7, "max_tokens": 1000})
    v1 = version_publish(bundle=bundle, content=doc, message="v1", actor=ops.actor).version
    path = "/api/v1/bundles/refunds/versions/1/derive/"
    response = publisher.post(path, {"model": {"name": "claude-sonnet-4-6"}, "message": "off gpt-5"})
    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["number"] == 2 and answer["derived_from"] == 1
    assert answer["content"]["model"] == {"name": "claude-sonnet-4-6", "temperature": 0.2, "max_tokens": 1000}
    assert answer["notes"] == ["Dropped model.seed: anthropic models do not take it."]
    old = json.loads(bytes(v1.canonical))
    new = answer["content"]
    assert {k: v for k, v in new.items() if k != "model"} == {k: v for k, v in old.items() if k != "model"}
    assert answer["model"]["catalog"]["name"] == "claude-sonnet-4-6"
    again = publisher.post(path, {"model": {"name": "claude-sonnet-4-6"}, "message": "again"})
    assert again.status_code == 200 and again.json()["number"] == 2
    settings.MODEL_CLOCK_NOW = "2026-12-01T00:00:00+00:00"  # claude-sonnet-4-5 retired the day before
    retired = publisher.post(path, {"model": {"name": "claude-sonnet-4-5"}, "message": "no"})
    assert retired.status_code == 400 and retired.json()["error"]["code"] == "model_retired"
    for bad in ({"model": {}, "message": "m"}, {"model": "gpt", "message": "m"}, {"model": {"name": "x"}}):
        assert publisher.post(path, bad).status_code == 400
    assert (
        publisher.post(
            "/api/v1/bundles/refunds/versions/9/derive/", {"model": {"name": "x"}, "message": "m"}
        ).status_code
        == 404
    )


# --- both HTTP lanes agree ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_both_lanes_answer_a_session_on_a_retired_model_alike(settings):
    settings.MODEL_CLOCK_NOW = BEFORE
    agent = make_api(Role.AGENT, name="t-agent")
    bundle = bundle_create(name="refunds", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="v1", actor=SYSTEM).version
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="ship")
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    path = f"/api/v1/sessions/{session.pk}/"
    turn = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    fast, slow = both("GET", path + "bundle/", agent.secret)
    _same(fast, slow)
    assert fast[0] == 200
    settings.MODEL_CLOCK_NOW = AFTER
    for method, suffix, body in [("GET", "bundle/", b""), ("POST", "turn/", turn), ("POST", "heartbeat/", b"")]:
        fast, slow = both(method, path + suffix, agent.secret, body, **{"Content-Type": "application/json"})
        _same(fast, slow)
        assert fast[0] == 410 and json.loads(fast[2])["error"]["code"] == "model_retired", fast[2]
    start = json.dumps({"bundle": "refunds"}).encode()
    fast, slow = both("POST", "/api/v1/sessions/", agent.secret, start, **{"Content-Type": "application/json"})
    _same(fast, slow)
    assert fast[0] == 409 and json.loads(fast[2])["error"]["details"]["labels"] == {"production": 1}


# --- the admin ------------------------------------------------------------------------------------


def test_the_admin_shows_the_retiring_models_and_migrates_a_version_to_the_replacement(settings, ops, bundle, gpt5):
    from adminui.groups import PROMPT_ENGINEERS
    from tests.adminui.test_adminui_views import client_for, make_user

    settings.MODEL_CLOCK_NOW = WITHIN
    session_start(bundle=bundle, actor=ops.actor)
    engineer = client_for(make_user("pat", PROMPT_ENGINEERS))
    home = engineer.get("/admin/").content.decode()
    assert "1 label pins models that retire within 30 days" in home
    page = engineer.get("/admin/registry/bundle/models/retiring/").content.decode()
    assert "openai/gpt-5: retires on 2026-12-11 (20 days left), replacement gpt-6.1-sol" in page
    assert 'data-bundle="refunds" data-version="1"' in page and "Migrate to gpt-6.1-sol" in page
    assert engineer.get("/admin/registry/bundle/models/retiring/?within=forever").status_code == 400
    # gpt-6.1-sol is in the catalog with no facts: the migration publishes v2 on it
    response = engineer.post("/admin/registry/bundle/refunds/versions/1/migrate/")
    assert response.status_code == 302 and response["Location"].endswith("/refunds/versions/2/")
    v2 = bundle.versions.get(number=2)
    assert json.loads(bytes(v2.canonical))["model"] == {"name": "gpt-6.1-sol"}
    assert v2.message.startswith("Migrate v1 from gpt-5 (retires 2026-12-11) to gpt-6.1-sol")


def test_the_python_client_raises_model_retired_which_is_a_version_revoked():
    import httpx
    from promptreg.errors import ModelRetired, SessionEnded, VersionRevoked, error_from_response

    details = {"labels": {"production": 2}, "model": "gpt-5", "retires_at": "2026-12-11", "replacement": "gpt-6.1-sol"}
    body = {"error": {"code": "model_retired", "message": "gpt-5 retired", "details": details}}
    error = error_from_response(httpx.Response(410, json=body))
    assert isinstance(error, ModelRetired) and isinstance(error, VersionRevoked)  # code written for revokes restarts
    assert error.labels == {"production": 2} and error.replacement == "gpt-6.1-sol"
    assert error.model == "gpt-5" and error.retires_at == "2026-12-11"
    ended = {"error": {"code": "session_ended", "message": "ended", "details": {}}}
    assert type(error_from_response(httpx.Response(410, json=ended))) is SessionEnded


def test_a_release_and_its_rollback_ask_the_same_question(settings, ops, bundle, gpt5):
    v2 = version_publish(
        bundle=bundle, content=content("Two.", model={"name": "gpt-4o"}), message="v2", actor=ops.actor
    )
    body = {"moves": [{"bundle": "refunds", "label": "production", "version": 2}], "reason": "to 4o"}
    release = ops.post("/api/v1/releases/", body)
    assert release.status_code == 201, release.content  # gpt-4o retires 2027-01-14: outside the window
    settings.MODEL_CLOCK_NOW = WITHIN
    path = f"/api/v1/releases/{release.json()['id']}/rollback/"
    refused = ops.post(path, {"reason": "back to gpt-5"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "model_retiring"
    assert ops.post(path, {"reason": "back to gpt-5", "allow_retiring": True}).status_code == 201
    assert Label.objects.get(name="production").version_id == gpt5.pk != v2.version.pk


def test_ops_correct_the_catalog_from_the_admin(settings, db):
    from adminui.groups import OPS, PROMPT_ENGINEERS
    from tests.adminui.test_adminui_views import client_for, make_user

    settings.MODEL_CLOCK_NOW = BEFORE
    page = client_for(make_user("pat", PROMPT_ENGINEERS)).get("/admin/registry/bundle/models/")
    assert page.status_code == 200 and 'data-model="gpt-5"' in page.content.decode()
    assert 'id="model-form"' not in page.content.decode()  # not ops: the table only
    ops = client_for(make_user("sam", OPS))
    form = {
        "provider": "openai",
        "name": "gpt-5",
        "retires_at": "2026-12-18",
        "source_url": "https://developers.openai.com/api/docs/deprecations",
        "source_read": "2026-11-01",
        "reason": "the page moved the date",
    }
    assert ops.post("/admin/registry/bundle/models/", {**form, "source_url": "javascript:x"}).status_code == 400
    response = ops.post("/admin/registry/bundle/models/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert catalog.model_get(provider=None, name="gpt-5").retires_at == date(2026, 12, 18)
    assert AuditEvent.objects.get(action="model.updated").actor == "user:sam"


def test_derive_keeps_the_includes_pinned_as_version_n_had_them(settings, ops, publisher):
    # An include resolved at N's publish is not resolved again: the derived prompt is N's,
    # byte for byte, though the included label moved since.
    settings.MODEL_CLOCK_NOW = BEFORE
    tone = bundle_create(name="tone", actor=ops.actor)
    t1 = version_publish(bundle=tone, content=content("Be kind."), message="t1", actor=ops.actor).version
    label_move(bundle=tone, name="production", version=t1, actor=ops.actor, reason="first")
    support = bundle_create(name="support", actor=ops.actor)
    doc = content("Support. {{> tone@production}}", model={"name": "gpt-5"})
    v1 = version_publish(bundle=support, content=doc, message="v1", actor=ops.actor).version
    t2 = version_publish(bundle=tone, content=content("Be brief."), message="t2", actor=ops.actor).version
    label_move(bundle=tone, name="production", version=t2, actor=ops.actor, reason="newer tone")
    body = {"model": {"name": "claude-sonnet-4-6"}, "message": "off gpt-5"}
    derived = publisher.post("/api/v1/bundles/support/versions/1/derive/", body)
    assert derived.status_code == 201, derived.content
    old, new = json.loads(bytes(v1.canonical)), derived.json()["content"]
    assert "Be kind." in new["system_prompt"] and new["includes"] == old["includes"]
    assert {k: v for k, v in new.items() if k != "model"} == {k: v for k, v in old.items() if k != "model"}
