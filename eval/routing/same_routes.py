"""Every routed list of every evaluation turn, before and after a change, compared exactly:

    .venv/bin/python -m eval.routing.same_routes [--before REF]

compare.py says whether hit@k moved; this says whether anything a route returns moved at all.
The tree at REF (default main) is extracted with `git archive`; this file, run in a fresh
process per tree with that tree first on sys.path, replays every set of eval/routing (dev,
workspace and the frozen splits) and the turn bench's conversation (bench/pinned_fetch.py: 100
cards, a 20-message history) under the default parameters, the lexical path alone and the
reciprocal-rank fusion, with k=5 and with k=1000 (the whole ranking), with histories built as
the service builds them, each turn twice (the second answer must equal the first). Every
RouteResult (names, rounded scores, categories, `why`, demoted) is written as one JSON line;
the two trees' lines must be equal. Exits 1 at the first difference.
"""

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SETS = ("dev", "workspace", "test", "test2", "test3", "test4", "test5", "test6", "test7")
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "lexical": {"semantic": False}, "rrf": {"fusion": "rrf"}}


def conversations_of(root: Path) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(name, cards, conversations) of every set, then the turn bench's."""
    out = []
    for name in SETS:
        folder = root / "eval" / "routing" / ("" if name == "dev" else name)
        cards = json.loads((folder / "skills.json").read_text())
        out.append((name, cards, json.loads((folder / "conversations.json").read_text())))
    sys.path.insert(0, str(root / "bench"))
    import pinned_fetch

    history = pinned_fetch.turn_history()
    out.append(("bench", pinned_fetch.skill_cards(100), [{"messages": history}]))
    return out


def replay(index: Any, router: Any, conversation: dict[str, Any], write: Any) -> None:
    if "messages" in conversation:  # the bench's: one turn of the whole history
        for k in (5, 1000):
            for _ in range(2):
                write(index.route(conversation["messages"], k=k, history=router.History()))
        return
    for reply in (None, "Done."):  # user messages alone, then with an assistant reply between
        messages: list[dict[str, str]] = []
        loaded: list[frozenset[str]] = []
        invoked: list[frozenset[str] | None] = []
        for turn in conversation["turns"]:
            messages.append({"role": "user", "content": turn["user"]})
            history = router.History(loaded=loaded[:2], invoked=invoked[:2])
            for k in (1000, 5, 5):
                result = index.route(messages, k=k, history=history)
                write(result)
            names = frozenset(r["name"] for r in result.routed)
            loaded.insert(0, names)
            invoked.insert(0, frozenset({turn["expect"]}) & names)
            if reply:
                messages.append({"role": "assistant", "content": reply})


def dump(root: Path, out: Path) -> None:
    sys.path.insert(0, str(root))
    from skills import router
    from skills.params import DEFAULT

    with out.open("w") as f:

        def write(result: Any) -> None:
            f.write(json.dumps(dataclasses.asdict(result), ensure_ascii=False, sort_keys=True) + "\n")

        for name, cards, conversations in conversations_of(root):
            for variant, fields in VARIANTS.items():
                f.write(json.dumps({"set": name, "variant": variant}) + "\n")
                index = router.Index(cards, None, dataclasses.replace(DEFAULT, **fields))
                for conversation in conversations:
                    replay(index, router, conversation, write)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the commit to compare with (the one before the change)")
    parser.add_argument("--dump", help=argparse.SUPPRESS)  # ROOT:OUT, in a fresh process per tree
    args = parser.parse_args()
    if args.dump:
        root, out = args.dump.split(":")
        dump(Path(root), Path(out))
        return
    from eval.routing.compare import ROOT, extract

    with tempfile.TemporaryDirectory() as folder:
        old_root = extract(args.before, Path(folder) / "tree")
        files = []
        for label, root in (("before", old_root), ("after", ROOT)):
            out = Path(folder) / f"{label}.jsonl"
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--dump", f"{root}:{out}"], check=True)
            files.append(out.read_text().splitlines())
    before, after = files
    for n, (old, new) in enumerate(zip(before, after, strict=False)):
        if old != new:
            print(f"line {n + 1} differs:\n  before {old[:400]}\n  after  {new[:400]}")
            raise SystemExit(1)
    if len(before) != len(after):
        print(f"{len(before)} lines before, {len(after)} after")
        raise SystemExit(1)
    digest = hashlib.sha256("\n".join(after).encode()).hexdigest()[:16]
    print(f"{len(after)} route results, identical before ({args.before}) and after (sha256 {digest})")


if __name__ == "__main__":
    main()
