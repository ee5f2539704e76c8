"""The catalog's sources and the ids it resolves (issue 41, continued): Bedrock ids keep
Bedrock's own dates; the home page's line is kept per process and follows what moves it; and
the suite's fixtures and the docs' examples pin no model the catalog dates, so no calendar date
(and no change of the suite's fixed clock) can turn them red."""

import json
import re
from datetime import date
from pathlib import Path

import pytest
from django.core.management import call_command

from access.actors import SYSTEM
from adminui import selectors as home
from modelcatalog import selectors as catalog
from registry.services import bundle_create, label_move, version_publish
from tests.conftest import content

ROOT = Path(__file__).resolve().parents[2]

# Where a model is pinned as an example to copy or as a fixture other tests publish and run.
PIN_SITES = [
    "README.md",
    "docs",
    "tests/fixtures",
    "tests/mlflow_prompts.py",
    "tests/turns/test_real_loops.py",
    "clients/typescript/README.md",
    "clients/typescript/src",
    "clients/typescript/test/ai-sdk-loop.mjs",
    "evals/endpoints.py",
]
# A model id as these files quote it: in double or single quotes or backticks. In Markdown only
# the fenced examples count: the prose may name a dated model to say it retires.
QUOTED = re.compile(r"""["'`]([A-Za-z][\w.:/@-]{1,150})["'`]""")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def _pin_site_files() -> list[Path]:
    out = []
    for site in PIN_SITES:
        path = ROOT / site
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [f for f in files if f.suffix in (".md", ".py", ".json", ".ts", ".mjs", ".yaml", ".yml")]
    return out


def test_no_fixture_or_example_pins_a_model_the_catalog_dates(db):
    dated = []
    for path in _pin_site_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".md":
            text = "\n".join(FENCED.findall(text))
        for token in set(QUOTED.findall(text)):
            info = catalog.model_get(provider=None, name=token)
            if info is not None and info.retires_at is not None:
                where = f"{info.provider}/{info.name} retires {info.retires_at}"
                dated.append(f"{path.relative_to(ROOT)}: {token} ({where})")
    assert len(_pin_site_files()) > 30
    assert dated == [], "\n".join(sorted(dated))


# --- Bedrock ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    ],
)
def test_a_bedrock_id_has_the_models_facts_but_not_the_claude_apis_dates(db, name):
    api = catalog.model_get(provider=None, name="claude-sonnet-4-5-20250929")
    found = catalog.model_get(provider=None, name=name)
    assert api.retires_at is not None and api.retired()
    assert found.provider == "bedrock" and (found.retires_at, found.replacement, found.retired()) == (None, None, False)
    assert (found.cache_floor_tokens, found.input_per_mtok) == (api.cache_floor_tokens, api.input_per_mtok)
    assert "retires_at" not in found.as_dict()["sources"]
    assert catalog.model_get(provider="anthropic", name=name) is None


def test_bedrocks_own_dates_come_from_its_entry_and_ops_can_add_them(settings, ops, agent):
    settings.MODEL_CLOCK_NOW = "2026-12-07T12:00:00+00:00"
    sonnet4 = catalog.model_get(provider=None, name="us.anthropic.claude-sonnet-4-20250514-v1:0")
    assert sonnet4.name == "anthropic.claude-sonnet-4-20250514-v1:0" and sonnet4.retired()
    assert sonnet4.cache_floor_tokens == 1024 and "bedrock" in sonnet4.source_of("retires_at").url
    path = "/api/v1/models/bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0/"
    source = {"url": "https://docs.aws.amazon.com/bedrock/latest/userguide/model-lifecycle.html", "read": "2026-12-07"}
    body = {"facts": {"retires_at": "2027-03-01"}, "source": source}
    assert ops.put(path, {**body, "reason": "AWS's lifecycle page"}).status_code == 200
    found = catalog.model_get(provider=None, name="eu.anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert (found.provider, found.retires_at.isoformat(), found.cache_floor_tokens) == ("bedrock", "2027-03-01", 1024)
    # The Claude API's model keeps its own date, and the Bedrock entry shows in the list.
    assert catalog.model_get(provider=None, name="claude-sonnet-4-5").retires_at.isoformat() == "2026-11-30"
    listed = {(m["provider"], m["name"]) for m in agent.get("/api/v1/models/").json()["results"]}
    assert ("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0") in listed


# --- the home page's line ---------------------------------------------------------------------------


def test_the_home_pages_line_is_kept_and_follows_label_moves_overrides_and_the_day(
    settings, ops, django_assert_num_queries
):
    settings.MODEL_CLOCK_NOW = "2026-11-20T12:00:00+00:00"  # gpt-5 retires 2026-12-11: within 30 days
    settings.MODEL_CATALOG_CACHE_SECONDS = 3600
    home.retiring_line_forget()
    bundle = bundle_create(name="refunds", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="v1", actor=SYSTEM).version
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="r", allow_retiring=True)
    assert home.retiring_line()["labels"] == 1
    with django_assert_num_queries(1):  # kept: only the labels' revision is read
        assert home.retiring_line()["labels"] == 1
    # A label moved onto it counts at once.
    label_move(bundle=bundle, name="staging", version=v1, actor=SYSTEM, reason="r", allow_retiring=True)
    assert home.retiring_line()["labels"] == 2
    # An override of the catalog counts at once: gpt-5's date moved out of the window.
    path = "/api/v1/models/openai/gpt-5/"
    body = {"facts": {"retires_at": "2027-06-01"}, "source": {"url": "https://x.example", "read": "2026-11-20"}}
    assert ops.put(path, {**body, "reason": "extended"}).status_code == 200
    assert home.retiring_line()["labels"] == 0
    # The next day of the catalog's clock is read afresh.
    settings.MODEL_CLOCK_NOW = "2027-05-10T12:00:00+00:00"
    assert home.retiring_line() == {"labels": 2, "models": 1, "days": 30}


def test_models_import_reads_bedrocks_own_dates_from_its_model_list(settings, tmp_path, db):
    """`aws bedrock list-foundation-models` saved as JSON: endOfLifeTime is Bedrock's date for the
    Bedrock id, never the Claude API's model's."""
    settings.MODEL_CLOCK_NOW = "2026-12-07T12:00:00+00:00"
    listing = {
        "modelSummaries": [
            {
                "modelId": "anthropic.claude-sonnet-4-5-20250929-v1:0",
                "providerName": "Anthropic",
                "modelLifecycle": {
                    "status": "LEGACY",
                    "legacyTime": "2026-09-30T00:00:00+00:00",
                    "endOfLifeTime": "2027-03-31T00:00:00+00:00",
                },
            },
            {"modelId": "amazon.nova-lite-v1:0", "modelLifecycle": {"status": "LEGACY", "endOfLifeTime": 1798761600}},
            {"modelId": "anthropic.claude-sonnet-4-6", "modelLifecycle": {"status": "ACTIVE"}},
            {"modelId": "meta.llama3-70b-instruct-v1:0", "modelLifecycle": {"status": "LEGACY", "endOfLifeTime": 1}},
        ]
    }
    path = tmp_path / "bedrock-models.json"
    path.write_text(json.dumps(listing))
    call_command("models_import", str(path), "--reason", "AWS lifecycle")
    on_bedrock = catalog.model_get(provider=None, name="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert (on_bedrock.provider, on_bedrock.retires_at, on_bedrock.deprecated_at) == (
        "bedrock",
        date(2027, 3, 31),
        date(2026, 9, 30),
    )
    assert on_bedrock.source_of("retires_at").url == "file:bedrock-models.json" and not on_bedrock.retired()
    assert catalog.model_get(provider=None, name="claude-sonnet-4-5").retires_at == date(2026, 11, 30)
    assert catalog.model_get(provider=None, name="us.amazon.nova-lite-v1:0").retires_at == date(2027, 1, 1)
    assert catalog.model_get(provider=None, name="anthropic.claude-sonnet-4-6").retires_at is None
    assert not any(m.name.startswith("meta.") for m in catalog.model_list())
