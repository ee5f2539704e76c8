"""`promptreg`: prompts as code. Push a bundle directory, pull one, diff two versions.

    promptreg push DIR --bundle NAME [--message M] [--label L --reason R [--allow-breaking]]
    promptreg pull NAME [--version N | --label L] DIR
    promptreg diff NAME A B
    promptreg catalog
    promptreg check report NAME VERSION --name CHECK --status pending|success|failure
                   [--summary S] [--details-url URL]   (for CI: what a label's required checks read)
    promptreg export DIR [--bundle NAME ...]        (every version's canonical bytes by hash, labels as data)
    promptreg import-bundles DIR [--allow-breaking] (the same hashes come out; idempotent)
    promptreg import openai|langfuse FILE [--bundle B] [--dry-run] [--allow-breaking]
    promptreg import mlflow --tracking-uri URI [--prompt NAME ...] [--bundle B] [--dry-run]
                   (prompts kept elsewhere, as bundles; idempotent; docs/importing.md)
    promptreg mcp-stdio            (a stdio MCP server forwarding to the registry; needs the mcp extra)
    promptreg eval import SUITE FILE [--message M]   (a JSONL of items or a GitHub Models .prompt.yml)
    promptreg eval run NAME (--version N | --label L) --suite S[@V] --provider P [--runs 3]
                   [--threshold 0.8] [--base-url URL] [--model M] [--concurrency 4] [--max-cost USD]
    promptreg eval compare RUN_A RUN_B   (two runs side by side, flips first; docs/evals.md)

The registry comes from --url / --api-key or REGISTRY_URL / REGISTRY_API_KEY. Output is for
people; --json prints one JSON document for scripts. Exit status: 0 done (including
"unchanged"), 1 refused by the registry or an invalid directory, 2 usage, 3 unreachable."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from promptreg import bundledir, evalcli, importers, transfer
from promptreg.cliout import Failure, Output, _registry
from promptreg.errors import Conflict, InvalidRequest, NotFound, RegistryError, Unavailable
from promptreg.importers import langfuse as importers_langfuse
from promptreg.importers import mlflow as importers_mlflow
from promptreg.importers import openai as importers_openai
from promptreg.sync import Registry


def _places(directory: bundledir.BundleDir, details: dict[str, Any]) -> list[dict[str, str]]:
    """The registry's error details ({path: [messages]}) as places in the directory."""
    found = []
    for path, messages in details.items():
        for message in messages if isinstance(messages, list) else [messages]:
            found.append({"path": path, "place": directory.place(path), "message": str(message)})
    return found


def push(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    if args.label and not args.reason:
        raise Failure("--label needs --reason: every label move records why.", status=2)
    directory = bundledir.BundleDir(args.dir)
    try:
        content = directory.read()
    except bundledir.BundleDirError as exc:
        raise Failure(
            f"error: {exc.place}: {exc.message}", doc={"errors": [{"place": exc.place, "message": exc.message}]}
        )
    if getattr(args, "pin_mcp", False):
        content = _pin_mcp(content, out)
    with _registry(args) as registry:
        try:
            registry.bundle_info(args.bundle)
        except NotFound:
            registry.create_bundle(args.bundle, description=args.description or "", when_to_use=args.when_to_use or "")
            out.say(f"created bundle {args.bundle}")
        try:
            message = args.message or f"promptreg push {os.path.basename(os.path.abspath(args.dir))}"
            version, created = registry.publish(args.bundle, content, message=message)
        except InvalidRequest as exc:
            errors = _places(directory, exc.details) or [{"path": "", "place": str(args.dir), "message": exc.message}]
            lines = "\n".join(f"error: {e['place']}: {e['message']}" for e in errors)
            raise Failure(f"{exc.message}\n{lines}", doc={"errors": errors})
        doc: dict[str, Any] = {
            "bundle": args.bundle,
            "version": version["number"],
            "content_hash": version["content_hash"],
            "created": created,
            "warnings": _places(directory, {w["path"]: [w["message"]] for w in version.get("warnings", [])}),
        }
        for warning in doc["warnings"]:
            out.warn(f"warning: {warning['place']}: {warning['message']}")
        if created:
            out.say(f"published {args.bundle} version {version['number']} ({version['content_hash'][:12]})")
        else:
            out.say(f"unchanged, version {version['number']}")
        if args.label:
            doc["label"] = _move(registry, args, version["number"], out)
    return doc


def _move(registry: Registry, args: argparse.Namespace, number: int, out: Output) -> dict[str, Any]:
    try:
        current = registry.label_info(args.bundle, args.label)["version"]
    except NotFound:
        current = None
    if current == number:
        out.say(f"{args.label} already targets version {number}")
        return {"name": args.label, "version": number, "moved": False}
    try:
        answer = registry.move_label(
            args.bundle, args.label, version=number, reason=args.reason, allow_breaking=args.allow_breaking
        )
    except Conflict as exc:
        changes = exc.details.get("changes") or []
        lines = "".join(f"\n  {c.get('level', '')}: {c.get('path', '')}: {c.get('message', '')}" for c in changes)
        hint = "" if args.allow_breaking else "\nPass --allow-breaking if this is meant."
        raise Failure(f"{args.label} not moved: {exc.message}{lines}{hint}", doc={"error": exc.message, **exc.details})
    if "change" in answer:  # 202: the label requires approvals; the move waits for them
        change = answer["change"]
        out.say(
            f"{args.label} not moved yet: change {change['id']} waits for "
            f"{change['required_approvals']} approval(s) (POST /api/v1/changes/{change['id']}/approve/)"
        )
        return {"name": args.label, "version": number, "moved": False, "from": current, "change": change["id"]}
    out.say(f"{args.label}: {current if current is not None else '(new)'} -> version {number}")
    return {"name": args.label, "version": number, "moved": True, "from": current}


def pull(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    if args.version is not None and args.label:
        raise Failure("Give --version or --label, not both.", status=2)
    with _registry(args) as registry:
        number = args.version
        if number is None:
            number = registry.label_info(args.name, args.label or "production")["version"]
        version = registry.version_info(args.name, number)
    written = bundledir.write(version["content"], args.dir)
    out.say(
        f"pulled {args.name} version {number} ({version['content_hash'][:12]}) into {args.dir}: {len(written)} files"
    )
    return {"bundle": args.name, "version": number, "content_hash": version["content_hash"], "files": written}


def diff(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    with _registry(args) as registry:
        found = registry.diff(args.name, args.a, args.b)
    out.say(f"{args.name} v{args.a} -> v{args.b}: {found['level']}")
    for change in found["changes"]:
        out.say(f"  {change['level']:<5} {change['path']}: {change['message']}")
    if not found["changes"]:
        out.say("  no changes")
    return found


def catalog(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    with _registry(args) as registry:
        entries = registry.catalog()
    for entry in entries:
        labels = ", ".join(f"{k}=v{v}" for k, v in sorted(entry["labels"].items()))
        out.say(f"{entry['name']}  [{labels}]  {entry.get('when_to_use') or entry.get('description') or ''}")
    return {"results": entries}


def export(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    root = args.dir
    written = []
    with _registry(args) as registry:
        names = args.bundle or registry.bundle_names()
        for name in names:
            document = registry.export_document(name)
            fetched = 0
            for version in document["versions"]:
                digest = version["content_hash"]
                if not transfer.has_object(root, digest):  # content-addressed: only what is new
                    try:
                        transfer.write_object(root, digest, registry.canonical(name, version["number"]))
                    except transfer.ExportDirError as exc:
                        raise Failure(f"{name} v{version['number']}: {exc}") from None
                    fetched += 1
            transfer.write_document(root, document)
            out.say(
                f"{name}: {len(document['versions'])} versions ({fetched} fetched), {len(document['labels'])} labels"
            )
            written.append({"bundle": name, "versions": len(document["versions"]), "fetched": fetched})
    return {"dir": str(root), "bundles": written}


# Canonical bytes sent per import call (a call's body may be 2 MiB; JSON escaping adds a little).
_IMPORT_CHUNK_BYTES = 1_000_000
# New versions per import call: the server publishes at most 100 in one call (registry.transfer).
_IMPORT_CHUNK_VERSIONS = 100


def import_bundles(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    try:
        found = transfer.read_export(args.dir)  # every object checked before anything is sent
    except transfer.ExportDirError as exc:
        raise Failure(f"{exc} (nothing was imported)") from None
    results = []
    with _registry(args) as registry:
        for document, objects in found:
            name = document["name"]
            try:
                present = {v["content_hash"] for v in registry.export_document(name)["versions"]}
            except NotFound:
                present = set()
            # Versions the registry lacks, in calls of bounded size; then one call with the whole
            # document (labels, revocations), whose versions are all there by then.
            chunk: list[dict[str, Any]] = []
            size = 0
            missing = [v for v in document["versions"] if v["content_hash"] not in present]
            for version in missing:
                data = objects[version["content_hash"]]
                if chunk and (size + len(data) > _IMPORT_CHUNK_BYTES or len(chunk) >= _IMPORT_CHUNK_VERSIONS):
                    _import_part(registry, document, chunk, objects, args.allow_breaking)
                    chunk, size = [], 0
                chunk.append(version)
                size += len(data)
            if chunk:
                _import_part(registry, document, chunk, objects, args.allow_breaking)
            result = registry.import_document(name, document, {}, allow_breaking=args.allow_breaking)
            result["versions_published"] = len(missing)
            out.say(
                f"{name}: {len(missing)} versions published, {len(document['versions']) - len(missing)} already there, "
                f"labels moved: {', '.join(result['labels_moved']) or '-'}"
            )
            results.append(result)
    return {"bundles": results}


def _import_part(
    registry: Registry,
    document: dict[str, Any],
    versions: list[dict[str, Any]],
    objects: dict[str, bytes],
    allow_breaking: bool,
) -> None:
    part = {**document, "versions": [{**v, "revoked": False} for v in versions], "labels": []}
    wanted = {v["content_hash"]: objects[v["content_hash"]] for v in versions}
    registry.import_document(document["name"], part, wanted, allow_breaking=allow_breaking)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as exc:
        raise importers.SourceError(f"{path}:{exc.lineno}:{exc.colno}: {exc.msg}") from None
    except OSError as exc:
        raise importers.SourceError(f"{path}: {exc.strerror}") from None


def _source_prompts(args: argparse.Namespace) -> list[importers.SourcePrompt]:
    if args.source == "openai":
        return [importers_openai.from_copy(_read_json(args.file), bundle=args.bundle)]
    if args.source == "langfuse":
        return importers_langfuse.from_export(_read_json(args.file), bundle=args.bundle)
    token = os.environ.get("MLFLOW_TRACKING_TOKEN") or None
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    auth = (user, password or "") if user else None
    with importers_mlflow.TrackingServer(args.tracking_uri, token=token, auth=auth) as server:
        return importers_mlflow.fetch(server, args.prompt, bundle=args.bundle)


def _refused(doc: dict[str, Any], *, allow_breaking: bool) -> str:
    """Why the import of one prompt stops, in one message (stderr)."""
    reasons = []
    for refusal in doc["refused"]:
        step, problem = refusal["step"], f"{refusal['message']} [{refusal['status']} {refusal['code']}]"
        if step.startswith("versions["):
            ref = doc["versions"][int(step[len("versions[") : -1])]["ref"]
            details = "; ".join(f"{path}: {' '.join(map(str, m))}" for path, m in refusal["details"].items())
            reasons.append(f"{ref}: the registry refused it: {problem} {details}".strip())
        elif step.startswith("labels."):
            reasons.append(f"{doc['bundle']}: a label was not moved: label {step[len('labels.') :]}: {problem}")
        else:
            reasons.append(f"{doc['bundle']}: {step}: {problem}")
    breaking = any(r["code"] == "conflict" for r in doc["refused"])
    hint = " Pass --allow-breaking if this is meant." if breaking and not allow_breaking else ""
    return "\n".join(reasons) + hint


def import_prompts(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    """`promptreg import SOURCE ...`: each source prompt as a bundle (docs/importing.md).

    The registry runs every step of each prompt's import (registry/imports.py) with this key: a
    dry run reports what each would do and which the registry would refuse; a real run first
    does the dry run of every prompt and stops before its first write when any step of any
    prompt would be refused, then imports each prompt all or nothing."""
    try:
        prompts = _source_prompts(args)
    except importers.SourceError as exc:
        raise Failure(f"error: {exc} (nothing was imported)") from None
    results = []
    with _registry(args) as registry:
        plans = [importers.plan(registry, prompt, allow_breaking=args.allow_breaking) for prompt in prompts]
        refused = [doc for doc in plans if doc["refused"]]
        if args.dry_run or refused:
            for doc in plans:
                for line in importers.describe(doc, dry_run=True):
                    out.say(line)
            if refused:
                reasons = "\n".join(_refused(doc, allow_breaking=args.allow_breaking) for doc in refused)
                raise Failure(f"{reasons}\nerror: the registry would refuse the steps above (nothing was imported)")
            return {"dry_run": True, "bundles": plans}
        for prompt in prompts:
            try:
                doc = importers.apply(registry, prompt, allow_breaking=args.allow_breaking)
            except importers.ImportRefused as exc:  # refused since the dry run just made (a race)
                reasons = _refused(exc.doc, allow_breaking=args.allow_breaking)
                raise Failure(f"{reasons}\nerror: {prompt.bundle} was refused (nothing of it was imported)") from None
            for line in importers.describe(doc, dry_run=False):
                out.say(line)
            results.append(doc)
    return {"dry_run": False, "bundles": results}


def mcp_stdio(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    url = args.url or os.environ.get("REGISTRY_URL")
    key = args.api_key or os.environ.get("REGISTRY_API_KEY")
    if not url or not key:
        raise Failure("Give the registry with --url and --api-key, or REGISTRY_URL and REGISTRY_API_KEY.", status=2)
    try:
        from promptreg import mcp_stdio as bridge
    except ImportError as exc:
        raise Failure(f"The stdio bridge needs the MCP SDK: pip install 'promptreg[mcp]' ({exc}).", status=2)
    bridge.run(url=url, api_key=key)
    return {}


def _pin_mcp(content: dict[str, Any], out: Output) -> dict[str, Any]:
    try:
        from promptreg import mcp_pin
    except ImportError as exc:
        raise Failure(f"--pin-mcp needs the MCP SDK: pip install 'promptreg[mcp]' ({exc}).", status=2)
    try:
        content, pinned = mcp_pin.content_pinned(content)
    except ValueError as exc:
        raise Failure(f"error: {exc} (nothing was published)") from None
    for name in pinned:
        out.say(f"pinned {name} from its MCP server")
    return content


def mcp_check(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    """`promptreg mcp check`: the registry lists the MCP servers its live versions pinned tools
    from and compares; exit 1 when a pinned tool drifted or a server could not be listed."""
    with _registry(args) as registry:
        report = registry.mcp_check()
    for d in report["drifts"]:
        out.say(
            f"{d['bundle']}@{d['version']}: {d['tool']} from {d['server']} {d['kind']}"
            f" ({d['sessions_active']} active session(s) at risk)"
        )
    for url, why in report["unreachable"].items():
        out.say(f"{url}: could not be listed: {why}")
    out.say(f"{report['checked']} pinned tool(s) compared, {len(report['drifts'])} drift(s)")
    if report["drifts"] or report["unreachable"]:
        raise Failure("drift found" if report["drifts"] else "a server could not be listed", doc=report)
    return report


def check_report(args: argparse.Namespace, out: Output) -> dict[str, Any]:
    registry = _registry(args)
    try:
        check = registry.report_check(
            args.bundle,
            args.version,
            check=args.name,
            status=args.status,
            summary=args.summary or "",
            details_url=args.details_url or "",
        )
    except NotFound as exc:
        raise Failure(f"error: {exc}", doc={"error": exc.message, "code": exc.code}) from None
    out.say(f"{args.bundle}@{args.version} ({check['content_hash'][:12]}): {check['name']} {check['status']}")
    return check


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: accepted before or after the command, and a subcommand's absent option must not
    # overwrite the value given before it (argparse's subparser defaults would).
    common.add_argument("--url", default=argparse.SUPPRESS, help="the registry's root URL (default: $REGISTRY_URL)")
    common.add_argument("--api-key", default=argparse.SUPPRESS, help="an API key (default: $REGISTRY_API_KEY)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="one JSON document for scripts")
    top = argparse.ArgumentParser(prog="promptreg", description=__doc__.split("\n\n")[0], parents=[common])
    commands = top.add_subparsers(dest="command", required=True)

    p = commands.add_parser("push", parents=[common], help="publish a bundle directory (idempotent)")
    p.add_argument("dir")
    p.add_argument("--bundle", required=True)
    p.add_argument("--message", help="the version's message (default: 'promptreg push DIR')")
    p.add_argument("--label", help="then point this label at the version")
    p.add_argument("--reason", help="why the label moves (required with --label)")
    p.add_argument("--allow-breaking", action="store_true", help="move the label even across a breaking change")
    p.add_argument("--description", help="when the bundle does not exist yet: its description")
    p.add_argument("--when-to-use", help="when the bundle does not exist yet: its when_to_use")
    p.add_argument(
        "--pin-mcp",
        action="store_true",
        help="list the MCP servers of mcp_servers.json from this machine and pin their tools before publishing",
    )
    p.set_defaults(run=push)

    p = commands.add_parser("pull", parents=[common], help="write a version as a bundle directory")
    p.add_argument("name")
    p.add_argument("dir")
    p.add_argument("--version", type=int)
    p.add_argument("--label", help="the version this label targets (default production)")
    p.set_defaults(run=pull)

    p = commands.add_parser("diff", parents=[common], help="compatibility level and changes from version A to B")
    p.add_argument("name")
    p.add_argument("a", type=int)
    p.add_argument("b", type=int)
    p.set_defaults(run=diff)

    p = commands.add_parser("catalog", parents=[common], help="what this key may start sessions on")
    p.set_defaults(run=catalog)

    p = commands.add_parser("check", parents=[common], help="checks of a version (CI evaluations)")
    check_commands = p.add_subparsers(dest="check_command", required=True)
    p = check_commands.add_parser("report", parents=[common], help="record a check result for a version")
    p.add_argument("bundle")
    p.add_argument("version", type=int)
    p.add_argument("--name", required=True, help="the check's name, as a label's required_checks names it")
    p.add_argument("--status", required=True, choices=["pending", "success", "failure"])
    p.add_argument("--summary", help="one line for people (at most 2000 characters)")
    p.add_argument("--details-url", help="where the run's details are (http or https)")
    p.set_defaults(run=check_report)

    p = commands.add_parser("export", parents=[common], help="write bundles as a content-addressed export")
    p.add_argument("dir")
    p.add_argument("--bundle", action="append", default=[], help="only this bundle (repeatable; default all)")
    p.set_defaults(run=export)

    p = commands.add_parser("import-bundles", parents=[common], help="import a content-addressed export")
    p.add_argument("dir")
    p.add_argument("--allow-breaking", action="store_true", help="move labels past their compatibility policy")
    p.set_defaults(run=import_bundles)

    _import_parser(commands, common)

    p = commands.add_parser("mcp", parents=[common], help="tools pinned from MCP servers")
    mcp_commands = p.add_subparsers(dest="mcp_command", required=True)
    p = mcp_commands.add_parser("check", parents=[common], help="compare live MCP servers with the pinned tools")
    p.set_defaults(run=mcp_check)

    p = commands.add_parser("mcp-stdio", parents=[common], help="serve MCP on stdio, forwarding to the registry")
    p.set_defaults(run=mcp_stdio)
    evalcli.add_parser(commands, common)
    return top


def _import_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("import", parents=[common], help="import prompts from OpenAI, Langfuse or MLflow")
    sources = p.add_subparsers(dest="source", required=True)
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--bundle", help="the bundle's name (default: from the prompt's name; one prompt only)")
    options.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    options.add_argument("--allow-breaking", action="store_true", help="move labels across breaking changes")
    p = sources.add_parser("openai", parents=[common, options], help="a JSON copy of a pmpt_... prompt's versions")
    p.add_argument("file")
    p.set_defaults(run=import_prompts)
    p = sources.add_parser("langfuse", parents=[common, options], help="Langfuse public API prompt objects (JSON)")
    p.add_argument("file")
    p.set_defaults(run=import_prompts)
    p = sources.add_parser("mlflow", parents=[common, options], help="a running MLflow prompt registry")
    p.add_argument("--tracking-uri", required=True, help="the MLflow tracking server, http://host:5000")
    p.add_argument("--prompt", action="append", default=[], help="only this prompt (repeatable; default all)")
    p.set_defaults(run=import_prompts)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name, default in (("url", None), ("api_key", None), ("json", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    out = Output(args.json)
    try:
        doc = args.run(args, out)
    except Failure as failure:
        if args.json:
            print(json.dumps(failure.doc, indent=2, ensure_ascii=False))
        else:
            print(str(failure), file=sys.stderr)
        return failure.status
    except Unavailable as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"error: {exc}", file=sys.stderr)
        return 3
    except RegistryError as exc:
        doc = {"error": exc.message, "status": exc.status, "code": exc.code, "details": exc.details}
        print(json.dumps(doc, ensure_ascii=False) if args.json else f"error: {exc}", file=sys.stderr)
        return 1
    out.done(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
