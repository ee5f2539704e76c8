"""The resident memory of one web worker, as `make run` starts it, before and after its first
route call: a fresh process imports the ASGI application granian serves (config.asgi), then
builds one version's routing index (test7's 90 cards, through skills.router.index_for with the
configured embedder, as a route call does) and routes one turn. Prints one JSON line (MB):

    .venv/bin/python eval/routing/memory.py [--root CHECKOUT] [--set FIELD=VALUE ...]

--root runs another checkout's code (eval/routing/compare.py measures the tree before a change
with it); --set builds the index with a variant of skills.params.RouterParams (`--set
piece_blend=1.0`: WordLlama never loaded). No database or Redis is opened: the index is built
from the cards in memory.
"""

import argparse
import json
import os
import secrets
import sys
from pathlib import Path


def resident() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = round(int(value.split()[0]) / 1024, 1)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent.parent)
    parser.add_argument("--set", dest="fields", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The settings refuse to start without these; nothing here connects to them.
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("DATABASE_URL", "postgres://memory-probe@127.0.0.1:9/none")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:9/0")
    started = resident()["VmRSS"]
    from config.asgi import application  # noqa: F401  (what granian imports in each worker)

    app = resident()["VmRSS"]
    from skills import router, services

    skills = json.loads((root / "eval" / "routing" / "test7" / "skills.json").read_text())
    options = {}
    if args.fields:  # a checkout with skills.params (eval/routing/inprocess.py builds the variant)
        from eval.routing.inprocess import params_from

        options["params"] = params_from(args.fields)
    index = router.index_for("memory-probe", skills, services.route_embedder(), **options)
    index.route([{"role": "user", "content": "my membership was charged twice this month"}])
    after = resident()
    print(json.dumps({"interpreter": started, "app": app, "after_route": after["VmRSS"], "peak": after["VmHWM"]}))


if __name__ == "__main__":
    main()
