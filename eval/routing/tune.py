"""A grid of router parameters on the tuning sets only (dev and workspace), ranked: the loop
for choosing a default before the frozen splits are run once (docs/skills.md, "Quality,
measured").

    .venv/bin/python -m eval.routing.tune [--sets dev,workspace] [--set FIELD=VALUE ...]
        [--grid FIELD=V1/V2/... ...] [--top N]

Every combination of the --grid values, on top of the defaults with each --set applied, is
replayed (eval/routing/inprocess.py's replay, the router alone) over the sets, and the rows are
printed pooled over them, best first: by hit@5, then hit@3, then hit@1, then the mean
reciprocal rank within the top 5. The frozen splits (test, test2, ..., test7) are refused: they
are run once per final candidate with `make eval-routing-compare`, never tuned on.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from eval.routing.inprocess import SETS, SPLITS, params_from  # noqa: E402
from skills import router  # noqa: E402
from skills.params import RouterParams  # noqa: E402

TUNING = ("dev", "workspace")


def score(params: RouterParams, sets: list[str]) -> tuple[int, int, int, float, int]:
    """(hit@1, hit@3, hit@5, reciprocal-rank sum, scored turns) pooled over `sets`."""
    h1 = h3 = h5 = n = 0
    rr = 0.0
    for name in sets:
        skills_path, conversations_path = SETS[name]
        index = router.Index(json.loads(skills_path.read_text()), None, params)
        for conversation in json.loads(conversations_path.read_text()):
            messages: list[dict[str, str]] = []
            loaded: list[frozenset[str]] = []
            invoked: list[frozenset[str] | None] = []
            for turn in conversation["turns"]:
                expect = turn["expect"]
                messages.append({"role": "user", "content": turn["user"]})
                result = index.route(messages, k=5, history=router.History(loaded=loaded[:2], invoked=invoked[:2]))
                ranked = [*[r for r in result.resident if r == expect], *(r["name"] for r in result.routed)]
                if turn.get("scored", True):
                    n += 1
                    if expect in ranked[:5]:
                        rank = ranked.index(expect) + 1
                        h1, h3, h5 = h1 + (rank == 1), h3 + (rank <= 3), h5 + 1
                        rr += 1 / rank
                loaded.insert(0, frozenset(r["name"] for r in result.routed))
                invoked.insert(0, frozenset([expect]) if expect in ranked else frozenset())
                messages.append({"role": "assistant", "content": turn.get("assistant", "Done.")})
    return h1, h3, h5, rr, n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", default=",".join(TUNING))
    parser.add_argument("--set", dest="fields", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--grid", action="append", default=[], metavar="FIELD=V1/V2/...")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    sets = args.sets.split(",")
    frozen = [s for s in sets if s in SPLITS]
    if frozen:
        raise SystemExit(f"{', '.join(frozen)}: a frozen split is not tuned on (make eval-routing-compare runs it)")
    axes = [(name, values.split("/")) for name, _, values in (g.partition("=") for g in args.grid)]
    rows = []
    for combination in itertools.product(*(values for _, values in axes)):
        chosen = [f"{name}={value}" for (name, _), value in zip(axes, combination, strict=True)]
        h1, h3, h5, rr, n = score(params_from([*args.fields, *chosen]), sets)
        rows.append(((h5, h3, h1, rr), " ".join(chosen) or "(defaults)", n))
        print(f"  {h1:>4} {h3:>4} {h5:>4} {rr / n:.3f}  {rows[-1][1]}", file=sys.stderr, flush=True)
    rows.sort(key=lambda row: row[0], reverse=True)
    base = f" on top of {' '.join(args.fields)}" if args.fields else ""
    print(f"pooled over {', '.join(sets)} ({rows[0][2]} turns){base}; best first")
    print(f"{'hit@1':>6}{'hit@3':>6}{'hit@5':>6}{'MRR@5':>7}  variant")
    for (h5, h3, h1, rr), label, n in rows[: args.top]:
        print(f"{h1:>6}{h3:>6}{h5:>6}{rr / n:>7.3f}  {label}")


if __name__ == "__main__":
    main()
