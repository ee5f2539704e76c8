"""The router's switches are one frozen object it takes (skills.params.RouterParams), not module
constants rewritten at run time; the distilled model's file is the pinned one; the per-text
vector cache is a bounded LRU; the in-process model is gone from the settings."""

import dataclasses
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eval.routing import inprocess
from skills import embedding, router
from skills.params import DEFAULT, RouterParams
from skills.router import Index
from tests.skills.test_skills import SKILLS

ROOT = Path(__file__).resolve().parents[2]
TURN = [{"role": "user", "content": "where is my parcel, the tracking page shows nothing"}]


def test_the_parameters_are_frozen_and_the_index_routes_with_the_ones_it_was_given():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.semantic_weight = 2.0  # type: ignore[misc]
    lexical = Index(SKILLS, params=RouterParams(semantic=False))
    assert lexical.semantic is None and lexical.params.semantic is False
    assert all("semantic" not in r["why"] for r in lexical.route(TURN).routed)
    default = Index(SKILLS)
    assert default.params is DEFAULT and any("semantic" in r["why"] for r in default.route(TURN).routed)
    # A second index with other parameters changes nothing of the first (no shared module state).
    Index(SKILLS, params=RouterParams(keyword_bonus=0.0, semantic=False))
    assert Index(SKILLS).route(TURN).routed == default.route(TURN).routed


def test_index_for_keeps_one_index_per_set_of_parameters(settings):
    settings.SKILL_INDEX_CACHE_BYTES = 256 * 1024 * 1024
    router._INDEXES = None
    try:
        plain = router.index_for("h-params", SKILLS)
        assert router.index_for("h-params", SKILLS) is plain
        other = router.index_for("h-params", SKILLS, params=RouterParams(semantic=False))
        assert other is not plain and other.semantic is None
        assert router.index_for("h-params", SKILLS, params=RouterParams(semantic=False)) is other
    finally:
        router._INDEXES = None


def test_no_router_module_keeps_a_tuning_constant_and_nothing_rewrites_one():
    tuning = re.compile(r"^[A-Z][A-Z0-9_]* = ", re.MULTILINE)
    for name in ("router.py", "semantic.py"):
        assert not tuning.findall((ROOT / "skills" / name).read_text()), name
    for folder in ("eval", "bench", "skills"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"setattr\((router|semantic|embedding|lexicon)\b", text), path


def test_the_evaluation_builds_its_variants_as_parameters():
    params = inprocess.params_from(
        ["piece_blend=1.0", "context_user=0.6,0.2", "lexicon=false", "fusion=rrf"], semantic=False
    )
    assert params == dataclasses.replace(
        DEFAULT, piece_blend=1.0, context_user=(0.6, 0.2), lexicon=False, fusion="rrf", semantic=False
    )
    with pytest.raises(SystemExit, match="no router parameter"):
        inprocess.params_from(["PIECE_BLEND=1.0"])
    with pytest.raises(SystemExit):
        inprocess.params_from(["fusion=max"])


def test_the_lexicon_switch_takes_its_concepts_out_of_the_query():
    # "reimburse" meets the refund card only through the lexicon's concept.
    turn = [{"role": "user", "content": "please reimburse me"}]
    with_lexicon = Index(SKILLS, params=RouterParams(semantic=False)).route(turn).routed
    without = Index(SKILLS, params=RouterParams(semantic=False, lexicon=False)).route(turn).routed
    assert with_lexicon and with_lexicon[0]["name"] == "refund_order"
    assert without == []


def test_a_blend_of_one_never_loads_the_english_only_model():
    index = Index(SKILLS, params=RouterParams(piece_blend=1.0))
    assert index.semantic is not None and index.semantic.local is None and index.semantic.pieces is not None
    assert index.route(TURN).routed[0]["name"] == "track_parcel"


def test_a_model_file_that_is_not_the_pinned_one_is_refused(tmp_path):
    assert embedding.PieceModel().dim > 0  # the committed file matches PIECE_MODEL_SHA256
    copy = tmp_path / "e5-static.npz"
    data = bytearray(embedding.PIECE_MODEL.read_bytes())
    data[len(data) // 2] ^= 1  # one bit
    copy.write_bytes(bytes(data))
    with pytest.raises(embedding.PieceModelMismatch, match="is not the pinned"):
        embedding.PieceModel(copy)


def test_the_vector_cache_is_a_bounded_lru(monkeypatch):
    model = embedding.piece_model()
    cache = model._cache
    assert cache.maxsize == embedding.QUERY_CACHE
    first = model.embed(["a text kept in the cache"])[0]
    assert model.embed(["a text kept in the cache"])[0] is not None
    key = embedding.text_key("a text kept in the cache")
    assert cache[key] is not None and np.array_equal(cache[key], first)
    long = "x" * (embedding.MAX_TEXT_CHARS + 500)
    assert np.array_equal(model.embed([long])[0], model.embed([long[: embedding.MAX_TEXT_CHARS]])[0])
    assert all(isinstance(k, bytes) and len(k) == 16 for k in cache)  # no text kept as a key
    for n in range(embedding.QUERY_CACHE + 10):
        model.embed([f"filler {n}"])
    assert len(cache) == embedding.QUERY_CACHE and key not in cache


def test_a_model_name_without_an_endpoint_refuses_to_start():
    env = {**os.environ, "SKILLS_EMBEDDING_MODEL": "multilingual-e5-small", "SKILLS_EMBEDDING_URL": ""}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DJANGO_SECRET_KEY="x" * 50)
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "SKILLS_EMBEDDING_MODEL needs SKILLS_EMBEDDING_URL" in done.stderr


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_an_index_build_gives_the_heap_it_freed_back_with_glibc(settings):
    assert router._malloc_trim() is not None
    settings.SKILL_INDEX_CACHE_BYTES = 256 * 1024 * 1024
    router._INDEXES = None
    try:
        assert router.index_for("h-trim", SKILLS).route(TURN).routed  # the build ends with the trim
    finally:
        router._INDEXES = None


def test_the_endpoint_is_the_one_pluggable_embedder_and_the_offline_models_are_not_endpoints():
    remote = embedding.RemoteEmbedder(url="http://127.0.0.1:9", model="m")
    assert isinstance(remote, embedding.Endpoint)
    assert not isinstance(embedding.piece_model(), embedding.Endpoint)


def test_the_comparison_reads_the_evaluation_tables():
    from eval.routing import compare

    figures = compare.figures(ROOT, ["workspace"], [])
    assert set(figures) == {"workspace"} and figures["workspace"]["all"][0] == 60
    assert all(0 <= v <= 100 for row in figures["workspace"].values() for v in row[1:])


def test_the_tuning_grid_scores_as_the_evaluation_does_ranks_best_first_and_refuses_the_frozen_splits():
    import json

    from eval.routing import tune

    skills_path, conversations_path = inprocess.SETS["workspace"]
    hits, _ = inprocess.replay(Index(json.loads(skills_path.read_text())), json.loads(conversations_path.read_text()))
    h1, h3, h5, rr, n = tune.score(DEFAULT, ["workspace"])
    assert [h1, h3, h5, n] == hits["all"] and h5 <= rr * 5 and rr <= h5
    command = [sys.executable, "-m", "eval.routing.tune", "--sets", "workspace", "--grid", "semantic_weight=0/1.5"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[-1] for row in rows] == ["semantic_weight=1.5", "semantic_weight=0"]  # the semantic path helps
    assert [int(v) for v in rows[0][:3]] == [h1, h3, h5]
    for frozen in ("test", "test7"):
        refused = subprocess.run(
            [sys.executable, "-m", "eval.routing.tune", "--sets", f"dev,{frozen}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode != 0 and f"{frozen}: a frozen split is not tuned on" in refused.stderr
