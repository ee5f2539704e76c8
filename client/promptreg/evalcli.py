"""`promptreg eval import | run | compare` (docs/evals.md): the commands; the runner is
promptreg.evalrun."""

from __future__ import annotations

import argparse
import os
from typing import Any

from promptreg import evalrun
from promptreg.cliout import Failure, Output, _registry
from promptreg.errors import NotFound
from promptreg.sync import Registry


def _suite_ref(text: str) -> tuple[str, int | None]:
    name, _, version = text.partition("@")
    if version and not version.isdigit():
        raise Failure(f"--suite {text}: give NAME or NAME@VERSION.", status=2)
    return name, int(version) if version else None


def eval_import(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    registry = _registry(args)
    with open(args.file, encoding="utf-8") as handle:
        text = handle.read()
    try:
        yml = args.file.endswith((".yml", ".yaml"))
        items = evalrun.items_from_prompt_yml(text) if yml else evalrun.items_from_jsonl(text)
    except ValueError as exc:
        raise Failure(f"{args.file}: {exc}") from None
    try:
        registry.json("GET", f"/api/v1/suites/{args.suite}/")
    except NotFound:
        registry.json("POST", "/api/v1/suites/", json={"name": args.suite})
    body = {"content": {"items": items}, "message": args.message or f"promptreg eval import {args.file}"}
    version = registry.json("POST", f"/api/v1/suites/{args.suite}/versions/", json=body)
    out.say(f"{args.suite} version {version['number']} ({version['content_hash'][:12]}): {len(items)} items")
    return version


def eval_run(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    registry = _registry(args)
    report_key = os.environ.get("REGISTRY_REPORT_KEY")
    reporter = Registry(registry.url, report_key) if report_key else registry
    suite, suite_version = _suite_ref(args.suite)
    version = evalrun.resolve_version(registry, args.bundle, args.version, args.label)
    plan = registry.json(
        "POST",
        f"/api/v1/bundles/{args.bundle}/versions/{version}/evals/plan/",
        json={"suite": suite, **({"suite_version": suite_version} if suite_version else {})},
    )
    if plan["problems"]:
        for problem in plan["problems"]:
            out.warn(problem)
        raise Failure(f"{len(plan['problems'])} item(s) cannot run on version {version}: nothing was sent", doc=plan)
    items = plan["content"]["items"]
    model = args.model or registry.version_info(args.bundle, version)["content"].get("model", {}).get("name")
    prices = evalrun.catalog_prices(registry, args.provider, model)
    calls, cost = evalrun.estimate(items, args.runs, prices)
    priced = f"about {cost:.4f} USD at most" if cost is not None else "cost unknown (the catalog has no price)"
    out.warn(f"{calls} model calls on {model or 'the version model'} ({args.provider}): {priced}")
    if args.max_cost is not None and cost is None:
        # Spending is counted by the catalog's prices: without one, no stop could ever come.
        raise Failure(
            f"--max-cost {args.max_cost} cannot be kept: the registry's model catalog has no price for "
            f"{model or 'the version model'}, so nothing could be counted against it. Add the price "
            "(PUT /api/v1/models/{provider}/{name}/) or run without --max-cost; nothing was sent",
            status=2,
        )
    runner = evalrun.Runner(
        registry, args.bundle, version, args.provider, args.base_url, args.model, prices, args.max_cost, total=calls
    )
    results = evalrun.run_all(runner, items, args.runs, args.concurrency)
    out.warn("")
    if runner.stopped:
        raise Failure(f"{runner.stopped}; nothing was recorded", doc={"error": runner.stopped})
    body = {
        "suite": suite,
        "suite_version": plan["suite_version"],
        "provider": args.provider,
        "model": model or "",
        "runs": args.runs,
        "threshold": args.threshold,
        "results": results,
    }
    run = reporter.json("POST", f"/api/v1/bundles/{args.bundle}/versions/{version}/evals/", json=body)
    for result in run["results"]:
        failed = [s["detail"] for s in result["scores"] if not s["passed"]]
        mark = "pass" if result["passed"] else "FAIL"
        out.say(f"{mark}  {result['item']} #{result['run']}" + (f"  {failed[0]}" if failed else ""))
    out.say(
        f"eval:{suite} {run['status']}: {run['passed']}/{run['total']} ({run['pass_rate']:.1%}, threshold "
        f"{args.threshold:.0%}) on {args.bundle}@{version}; run {run['id']}"
    )
    if run["status"] != "success":
        raise Failure(f"eval:{suite} failed on {args.bundle}@{version}", doc=run)
    return run


def eval_compare(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    answer = _registry(args).json("GET", "/api/v1/evals/compare/", params={"a": args.a, "b": args.b})
    a, b = answer["a"], answer["b"]
    out.say(f"a: v{a['version']} {a['pass_rate']:.1%}   b: v{b['version']} {b['pass_rate']:.1%}")
    for row in answer["items"]:
        flip = row["flip"] or ""
        out.say(f"{flip:<7} {row['item']}: {row['a']['pass_rate']:.0%} -> {row['b']['pass_rate']:.0%}")
    return answer


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("eval", parents=[common], help="evaluation suites and runs (docs/evals.md)")
    evals = p.add_subparsers(dest="eval_command", required=True)
    p = evals.add_parser("import", parents=[common], help="publish a suite version from a JSONL or .prompt.yml file")
    p.add_argument("suite")
    p.add_argument("file")
    p.add_argument("--message")
    p.set_defaults(run=eval_import)
    p = evals.add_parser("run", parents=[common], help="run a suite on a version through a provider's SDK")
    p.add_argument("bundle")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--version", type=int)
    which.add_argument("--label", help="the version this label targets (default production)")
    p.add_argument("--suite", required=True, help="NAME or NAME@VERSION (default its latest version)")
    p.add_argument("--provider", required=True, choices=sorted(evalrun.FORMATS))
    p.add_argument("--runs", type=int, default=1, help="runs per item (1 to 10)")
    p.add_argument("--threshold", type=float, default=1.0, help="pass rate the check needs (0 to 1)")
    p.add_argument("--base-url", help="the provider's endpoint (default: the SDK's)")
    p.add_argument("--model", help="instead of the version's model")
    p.add_argument("--concurrency", type=int, default=4, help="model calls at once")
    p.add_argument(
        "--max-cost",
        type=float,
        help="stop once this many USD are spent (by the catalog's prices; refused when the model has none)",
    )
    p.set_defaults(run=eval_run)
    p = evals.add_parser("compare", parents=[common], help="two runs side by side")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(run=eval_compare)
