"""What one version's skill index costs to build, in process: CPU seconds and estimated bytes.

    .venv/bin/python bench/index_build.py [--cards 500] [--chars 400] [--english] [--stored]

Builds skills.router.Index (the semantic path on, models warm) for `--cards` cards whose
descriptions are `--chars` random CJK ideographs (or, with --english, about as many characters
of English words), and prints the thread's CPU time, skills.router.index_bytes (what the
per-process cache counts, SKILL_INDEX_CACHE_BYTES) and, with --memory, what tracemalloc saw
allocated (a separate run: tracing slows the build severalfold); with --stored, the bytes of the
entry the worker stores in Redis (skills.index_store.dump) and the CPU a web process spends
loading it (restore, the MAC check aside). The card
text bound (registry.skills_content.MAX_CARD_TEXT_TOTAL) was chosen with it (issue 36)."""

import argparse
import json
import random
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.text import warm_up  # noqa: E402
from skills import index_store  # noqa: E402
from skills.router import Index, index_bytes  # noqa: E402

WORDS = ["refund", "order", "invoice", "parcel", "account", "password", "billing", "delivery", "cancel"]


def cards(n: int, chars: int, english: bool) -> list[dict]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        if english:
            text = " ".join(rng.choice(WORDS) for _ in range(chars // 7))
        else:
            text = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(chars))
        out.append(
            {
                "name": f"skill_{i}",
                "summary": "Use when it fits",
                "description": text,
                "keywords": ["one", "two", "three"],
                "examples": ["an example", "another one"],
                "category": "misc",
                "level": "L2",
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=500)
    parser.add_argument("--chars", type=int, default=400)
    parser.add_argument("--english", action="store_true")
    parser.add_argument("--stored", action="store_true", help="also the stored entry's bytes and its load")
    parser.add_argument("--memory", action="store_true", help="also trace allocations (slows the build severalfold)")
    args = parser.parse_args()
    warm_up()
    Index(json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())[:5])  # load the models
    skills = cards(args.cards, args.chars, args.english)
    if args.memory:
        tracemalloc.start()
    started = time.thread_time()
    index = Index(skills)
    cpu = time.thread_time() - started
    traced = f", traced {tracemalloc.get_traced_memory()[0] / 1e6:.1f} MB" if args.memory else ""
    text = sum(len(s["description"]) for s in skills)
    print(
        f"{args.cards} cards, {text} characters of descriptions: {cpu:.2f} s CPU, "
        f"index_bytes {index_bytes(index) / 1e6:.1f} MB{traced}"
    )
    if args.stored:
        body = index_store.dump(index)
        started = time.thread_time()
        index_store.restore(skills, body)
        print(f"stored entry {len(body) / 1e6:.1f} MB, loaded in {time.thread_time() - started:.3f} s CPU")


if __name__ == "__main__":
    main()
