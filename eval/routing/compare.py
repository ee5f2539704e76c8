"""Routing quality and a web worker's memory before and after a change, in one command:

    .venv/bin/python -m eval.routing.compare [--before REF] [--sets test,...,test7] [-k] [--no-memory]
        [--set FIELD=VALUE ...]
    make eval-routing-compare [BEFORE=REF]

The tree at REF (a commit, default BEFORE below: main before the routing lab left the product)
is extracted with `git archive` into a temporary folder; eval/routing/inprocess.py is run in
each tree on the frozen splits (hit@1, hit@3, hit@5 per split, and per kind with -k), and
eval/routing/memory.py measures, in a fresh process per tree, the resident memory of a web
worker that imported the ASGI application and served its first route call. The same interpreter
runs both, so the difference is the code's. `--set FIELD=VALUE` gives the checkout's router a
variant of its parameters (skills.params.RouterParams; `--set piece_blend=1.0`: the distilled
e5 alone), for the splits and the memory probe's index. Prints the figures side by side; exits
1 when any split's hit@5 dropped.
"""

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# tarfile's "data" filter (3.11.4 and later; Debian 12's Python is 3.11.2): our own git archive.
SAFE_EXTRACT: dict = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
BEFORE = "0880f40"  # main before the routing lab left the product (docs/skills.md, "Quality, measured")
SPLITS = "test,test2,test3,test4,test5,test6,test7"
ROW = re.compile(r"^(\S+)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%$")


def extract(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, **SAFE_EXTRACT)
    return into


def figures(root: Path, sets: list[str], options: list[str]) -> dict[str, dict[str, tuple[float, ...]]]:
    """{set: {kind: (turns, hit@1, hit@3, hit@5)}} from inprocess.py's tables."""
    command = [sys.executable, "-m", "eval.routing.inprocess", *sets, *options]
    out = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout
    result: dict[str, dict[str, tuple[float, ...]]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("== "):
            current = line.split()[1]
            result[current] = {}
        elif match := ROW.match(line):
            kind, *numbers = match.groups()
            result[current][kind] = tuple(float(n) for n in numbers)
    return result


def memory(root: Path, options: list[str]) -> dict[str, float]:
    command = [sys.executable, str(HERE / "memory.py"), "--root", str(root), *options]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    answer: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--sets", default=SPLITS)
    parser.add_argument("-k", "--kinds", action="store_true", help="every kind, not only each split's total")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--set", dest="fields", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    sets = args.sets.split(",")
    with tempfile.TemporaryDirectory() as folder:
        old_root = extract(args.before, Path(folder))
        old = figures(old_root, sets, [])
        new = figures(ROOT, sets, [f"--set={item}" for item in args.fields])
        old_memory = None if args.no_memory else memory(old_root, [])
    head = "rows: before -> after (hit@1 / hit@3 / hit@5, %)"
    variant = f" with {', '.join(args.fields)}" if args.fields else ""
    print(f"{head}; before = {args.before}, after = this checkout{variant}")
    print(f"{'set':<10}{'kind':<12}{'turns':>6}   {'before':<20}  {'after':<20}  {'hit@5':>6}")
    dropped = []
    pooled = {"before": 0, "after": 0}
    turns = 0
    for name in sets:
        kinds = sorted(new[name], key=lambda k: (k == "all", k)) if args.kinds else ["all"]
        for kind in kinds:
            n, *b = old[name][kind]
            _n, *a = new[name][kind]
            delta = a[2] - b[2]
            print(
                f"{name:<10}{kind:<12}{n:>6.0f}   {' / '.join(f'{v:5.1f}' for v in b):<20}  "
                f"{' / '.join(f'{v:5.1f}' for v in a):<20}  {delta:+6.1f}"
            )
            if kind == "all":
                pooled["before"] += round(n * b[2] / 100)
                pooled["after"] += round(n * a[2] / 100)
                turns += round(n)
                if delta < 0:
                    dropped.append(name)
    print(
        f"pooled hit@5 over {', '.join(sets)}: {pooled['before']} -> {pooled['after']} of {turns} turns "
        f"({100 * pooled['before'] / turns:.1f} % -> {100 * pooled['after'] / turns:.1f} %)"
    )
    if old_memory is not None:
        new_memory = memory(ROOT, [f"--set={item}" for item in args.fields])
        print("web worker resident memory, MB (interpreter / ASGI app imported / after its first route call / peak):")
        for label, m in (("before", old_memory), ("after", new_memory)):
            print(f"  {label:<7}{m['interpreter']:>7} {m['app']:>7} {m['after_route']:>7} {m['peak']:>7}")
    if dropped:
        print(f"hit@5 dropped on: {', '.join(dropped)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
