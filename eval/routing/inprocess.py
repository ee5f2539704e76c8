"""The router alone, in process, over an evaluation set: the quick loop for tuning on the dev
sets (no database, no HTTP). `make eval-routing` is the figure of record (through the API).

    .venv/bin/python -m eval.routing.inprocess [dev|workspace|test|test2|...|test7] [--lexical]
        [--fusion z|rrf] [--no-lexicon] [--set FIELD=VALUE ...] [-v]

Each variant is a `skills.params.RouterParams` built with `dataclasses.replace` from the
defaults (`--set piece_blend=1.0`, `--set context_user=0.5,0.3`) and passed to the index:
nothing rewrites a module constant.

With SKILLS_EMBEDDING_URL and SKILLS_EMBEDDING_MODEL in the environment (and optionally
SKILLS_EMBEDDING_KEY, SKILLS_EMBEDDING_TIMEOUT_MS), the semantic path uses that endpoint as the
service would (eval/routing/embedding_server.py serves multilingual-e5-small locally); a run in
which it failed even once says so, since the offline model then answered some turns.

Histories are built as the service builds them: the previous two turns' routed names, and the
expected skill reported as invoked when it was routed.
"""

import argparse
import dataclasses
import json
import os
import sys
import typing
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from skills import router  # noqa: E402
from skills.embedding import RemoteEmbedder  # noqa: E402
from skills.params import DEFAULT, RouterParams  # noqa: E402

SPLITS = ("test", "test2", "test3", "test4", "test5", "test6", "test7")  # the frozen splits
SETS = {
    "dev": (HERE / "skills.json", HERE / "conversations.json"),
    "workspace": (HERE / "workspace" / "skills.json", HERE / "workspace" / "conversations.json"),
    **{name: (HERE / name / "skills.json", HERE / name / "conversations.json") for name in SPLITS},
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


def _value(kind: Any, text: str) -> Any:
    """A field's value from the command line, of the field's type."""
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"not a boolean: {text!r}")
        return text.lower() in ("true", "1")
    if typing.get_origin(kind) is tuple:
        items = [i for i in text.split(",") if i]
        if typing.get_args(kind)[0] is float:
            return tuple(float(i) for i in items)
        return tuple((name, float(w)) for name, w in (i.split(":", 1) for i in items))  # field_weights
    if typing.get_origin(kind) is typing.Literal:
        if text not in typing.get_args(kind):
            raise SystemExit(f"one of {typing.get_args(kind)}: {text!r}")
        return text
    return kind(text)


def params_from(settings: list[str], **fields: Any) -> RouterParams:
    """The defaults with `fields` and each FIELD=VALUE of `settings` replaced."""
    types = typing.get_type_hints(RouterParams)
    for item in settings:
        name, _, text = item.partition("=")
        if name not in types:
            raise SystemExit(f"no router parameter {name!r}; one of {', '.join(types)}")
        fields[name] = _value(types[name], text)
    return dataclasses.replace(DEFAULT, **fields)


def _endpoint() -> RemoteEmbedder | None:
    url = os.environ.get("SKILLS_EMBEDDING_URL", "")
    if not url:
        if os.environ.get("SKILLS_EMBEDDING_MODEL"):
            raise SystemExit("SKILLS_EMBEDDING_MODEL needs SKILLS_EMBEDDING_URL (eval/routing/embedding_server.py)")
        return None
    timeout = int(os.environ.get("SKILLS_EMBEDDING_TIMEOUT_MS", "2000")) / 1000
    model, key = os.environ["SKILLS_EMBEDDING_MODEL"], os.environ.get("SKILLS_EMBEDDING_KEY", "")
    return RemoteEmbedder(url=url, model=model, api_key=key, timeout=timeout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("set", nargs="*", default=["dev", "workspace"])
    parser.add_argument("--lexical", action="store_true", help="the semantic path off")
    parser.add_argument("--fusion", choices=["z", "rrf"])
    parser.add_argument("--set", dest="fields", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument(
        "--english-cards", action="store_true", help="drop the cards' non-English keywords and examples"
    )
    parser.add_argument("--no-lexicon", action="store_true", help="no concept tokens (the bilingual lexicon off)")
    parser.add_argument("-v", action="store_true", help="list misses")
    args = parser.parse_args()
    fields: dict[str, Any] = {"fusion": args.fusion} if args.fusion else {}
    if args.lexical:
        fields["semantic"] = False
    if args.no_lexicon:
        fields["lexicon"] = False
    params = params_from(args.fields, **fields)
    for name in args.set:
        skills_path, conversations_path = SETS[name]
        skills = json.loads(skills_path.read_text())
        if args.english_cards:
            for card in skills:
                card["keywords"] = [k for k in card["keywords"] if k.isascii()] or card["keywords"][:1]
                card["examples"] = [e for e in card["examples"] if e.isascii()] or card["examples"][:1]
        embedder = _endpoint()
        index = router.Index(skills, embedder, params)
        hits, misses = replay(index, json.loads(conversations_path.read_text()))
        print(f"== {name}" + (f" (endpoint {embedder.url}, model {embedder.model})" if embedder else ""))
        print(table(hits))
        if embedder is not None and embedder.last_error:
            print(f"WARNING: the endpoint failed ({embedder.last_error}); the offline model answered some turns")
        if args.v:
            print("\n".join(misses))


if __name__ == "__main__":
    main()
