"""Writes of suites, suite versions and evaluation runs. Each top-level service owns its
transaction and checks the actor's role and scope itself (as registry.services does).

Lock order: the suite row (a publish), then what registry.services.check_record writes; a run
takes no lock (runs are append-only and a check's latest report wins by id)."""

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from audit.services import audit_record
from core.errors import Conflict, Forbidden, InvalidContent, NotFound
from core.limits import EVAL_CHECK_PREFIX, TEXT_MAX_CHARS, storable
from evals import attestation, content, scorers
from evals.models import SUITE_NAME_RE, EvalRun, RunStatus, Suite, SuiteVersion
from registry import variables
from registry.checks import CHECK_REPORTERS, check_record
from registry.models import Bundle, BundleVersion, CheckStatus, VersionCheck, VersionState

MAX_RUNS = 10  # runs per item in one evaluation
MAX_RESULTS = 5_000  # items x runs in one record
MAX_REPLY_CHARS = 100_000  # of one reply's text, as stored
REPLY_KEYS = frozenset({"text", "tool_calls", "usage", "cost_usd", "error", "judges", "latency_ms"})


@dataclass
class SuitePublishResult:
    version: SuiteVersion
    created: bool
    stale_checks: int = 0
    warnings: list[str] = field(default_factory=list)


def _text(name: str, value: Any, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if (
        not isinstance(value, str)
        or (required and not value.strip())
        or len(value) > TEXT_MAX_CHARS
        or not storable(value)
    ):
        raise InvalidContent(f"`{name}` is not valid.", {name: [f"Text of 1 to {TEXT_MAX_CHARS} characters."]})
    return value.replace("\r\n", "\n")


@transaction.atomic
def suite_create(*, name: object, description: object = "", actor: Actor) -> Suite:
    require_role(actor, Role.PUBLISHER, "Creating a suite")
    if not isinstance(name, str) or not re.fullmatch(SUITE_NAME_RE, name):
        raise InvalidContent("The suite name is not valid.", {"name": [f"Must match {SUITE_NAME_RE}."]})
    description = _text("description", description, required=False)
    suite, created = Suite.objects.get_or_create(
        name=name, defaults={"description": description, "created_by": actor.name}
    )
    if not created:
        raise Conflict(f"Suite {name!r} exists.", {"name": [name]})
    audit_record(actor=actor, action="suite.created", target_type="suite", target=name, data={})
    return suite


def _judges_exist(doc: dict[str, Any], actor: Actor) -> None:
    """Every judge the suite pins is a published version of a bundle this key may read."""
    errors: dict[str, list[str]] = {}
    for judge in content.judges(doc):
        found = BundleVersion.objects.filter(bundle__name=judge["bundle"], content_hash=judge["content_hash"]).exists()
        try:
            require_bundle_scope(actor, judge["bundle"])
        except (Forbidden, NotFound):
            found = False
        if not found:
            errors.setdefault("judge", []).append(
                f"No version of bundle {judge['bundle']!r} has content hash {judge['content_hash']}."
            )
    if errors:
        raise InvalidContent("A judge the suite pins does not exist.", errors)


@transaction.atomic
def suite_version_publish(*, suite: Suite, content_doc: object, message: object, actor: Actor) -> SuitePublishResult:
    """Publish the suite's next version, or return the one with the same canonical content
    (created=False). A new version makes the `eval:<suite>` checks run on an older one stale:
    each gets a `pending` report saying so, so no label treats it as passing any more."""
    require_role(actor, Role.PUBLISHER, "Publishing a suite version")
    message = _text("message", message)
    doc, canonical, digest = content.canonicalise(content_doc)
    _judges_exist(doc, actor)
    existing = SuiteVersion.objects.filter(suite=suite, content_hash=digest).first()
    if existing is not None:
        return SuitePublishResult(existing, False)
    Suite.objects.select_for_update().get(pk=suite.pk)  # numbers stay gapless
    existing = SuiteVersion.objects.filter(suite=suite, content_hash=digest).first()
    if existing is not None:
        return SuitePublishResult(existing, False)
    last = SuiteVersion.objects.filter(suite=suite).order_by("-number").values_list("number", flat=True).first()
    version = SuiteVersion.objects.create(
        suite=suite,
        number=(last or 0) + 1,
        canonical=canonical,
        content_hash=digest,
        message=message,
        author=actor.name,
    )
    audit_record(
        actor=actor,
        action="suite.published",
        target_type="suite",
        target=f"{suite.name}@{version.number}",
        reason=message,
        data={"content_hash": digest},
    )
    stale = _checks_mark_stale(suite=suite, version=version, actor=actor)
    return SuitePublishResult(version, True, stale)


@transaction.atomic
def suite_create_published(
    *, name: object, description: object, content_doc: object, message: object, actor: Actor
) -> SuitePublishResult:
    """A new suite and its first version, both or neither (the admin's new-suite form): the
    checks of suite_create and suite_version_publish, in one transaction."""
    suite = suite_create(name=name, description=description, actor=actor)
    return suite_version_publish(suite=suite, content_doc=content_doc, message=message, actor=actor)


def _checks_mark_stale(*, suite: Suite, version: SuiteVersion, actor: Actor) -> int:
    name = EVAL_CHECK_PREFIX + suite.name
    latest = (
        VersionCheck.objects.filter(name=name)
        .order_by("bundle_id", "content_hash", "-id")
        .distinct("bundle_id", "content_hash")
    )
    count = 0
    for check in latest.select_related("bundle"):
        evidence = check.evidence or {}
        if evidence.get("suite_sha256") == version.content_hash or evidence.get("stale"):
            continue
        bundle_version = BundleVersion.objects.filter(bundle=check.bundle, content_hash=check.content_hash).first()
        if bundle_version is None:
            continue
        check_record(
            bundle=check.bundle,
            version=bundle_version,
            name=name,
            status=CheckStatus.PENDING,
            summary=f"stale: suite {suite.name} is at version {version.number} now; run it again",
            actor=actor,
            evidence={"stale": True, "run": evidence.get("run"), "suite_sha256": evidence.get("suite_sha256")},
        )
        count += 1
    return count


def _valid_usage(usage: Any) -> bool:
    return isinstance(usage, dict) and all(
        not isinstance(v, bool) and isinstance(v, int) and 0 <= v < 1 << 40 for v in usage.values()
    )


# Each field of a reply: its default, whether a value is acceptable, and what to say when not.
_REPLY_RULES: dict[str, tuple[Any, Callable[[Any], bool], str]] = {
    "text": (
        "",
        lambda v: isinstance(v, str) and len(v) <= MAX_REPLY_CHARS,
        f"Text of at most {MAX_REPLY_CHARS} characters.",
    ),
    "tool_calls": (
        [],
        lambda v: isinstance(v, list) and len(v) <= 128 and all(isinstance(c, dict) for c in v),
        "A list of at most 128 {name, arguments}.",
    ),
    "usage": ({}, _valid_usage, "Token counts: non-negative integers."),
    "cost_usd": (
        None,
        lambda v: v is None or (scorers.is_number(v) and v >= 0),
        "A non-negative number, or null when unknown.",
    ),
    "error": (None, lambda v: v is None or isinstance(v, str), "Text, or null."),
    "judges": ({}, lambda v: isinstance(v, dict), "An object: expectation index -> {score, reason}."),
    "latency_ms": (
        None,
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "Milliseconds, or null.",
    ),
}


def _reply(value: Any, where: str, errors: dict[str, list[str]]) -> dict[str, Any]:
    """The runner's reply, in the neutral shape scorers read (evals.scorers), bounded; every
    problem goes to `errors` (and the record is then refused whole)."""
    if not isinstance(value, dict):
        errors.setdefault(where, []).append("An object: text, tool_calls, usage, cost_usd, error, judges.")
        return {"text": "", "tool_calls": [], "error": "no reply"}
    for key in sorted(set(value) - REPLY_KEYS):
        errors.setdefault(f"{where}.{key}", []).append(f"Unknown field; a reply has {', '.join(sorted(REPLY_KEYS))}.")
    reply: dict[str, Any] = {}
    for field_name, (default, ok, message) in _REPLY_RULES.items():
        given = value.get(field_name)
        given = default if given is None else given
        if not ok(given):
            errors.setdefault(f"{where}.{field_name}", []).append(message)
            given = default
        reply[field_name] = given
    reply["text"] = reply["text"].replace("\r\n", "\n")
    reply["tool_calls"] = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in reply["tool_calls"]]
    reply["error"] = reply["error"][:1000] if reply["error"] else None
    return reply


def eval_plan(*, version: BundleVersion, suite_version: SuiteVersion) -> list[str]:
    """Every reason the suite's items cannot run on this version (a variable it does not
    declare, a required one left out, a value of the wrong type), item by item: the runner
    asks before its first model call, so a run never stops half way for it."""
    doc = content.stored(suite_version.canonical)
    declared = json.loads(bytes(version.canonical)).get("variables")
    problems: list[str] = []
    if version.state in (VersionState.DRAINED, VersionState.REVOKED):
        # A session cannot pin it (registry.lifecycle.version_pin): every reply would be an error.
        # The worker's runs leave an unreleased version unreleased; a CLI run's sessions (the
        # public API's) drain it like any pin by number (docs/evals.md).
        problems.append(
            f"version {version.number} is {version.state}: no session can pin it, so no item can run; "
            "point a label at it to run it again"
        )
    for item in doc["items"]:
        for scope, key in (("session", "variables"), ("turn", "turn_variables")):
            try:
                variables.resolve(declared, item["input"].get(key, {}), scope=scope)
            except variables.VariableError as exc:
                problems += [
                    f"item {item['id']}: {key}.{k.removeprefix('variables.')}: {' '.join(m)}"
                    for k, m in exc.details.items()
                ]
    return problems


def _scored(doc: dict[str, Any], results: list[Any], *, runs: int, output_schema: Any) -> list[dict[str, Any]]:
    """Every item x run of the suite scored here, or InvalidContent naming every problem (an
    unknown item, a run out of range or reported twice, a missing one, a bad reply)."""
    items = {item["id"]: item for item in doc["items"]}
    errors: dict[str, list[str]] = {}
    scored: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for index, entry in enumerate(results):
        where = f"results[{index}]"
        if not isinstance(entry, dict) or entry.get("item") not in items:
            errors.setdefault(where, []).append("An object whose `item` is an item id of the suite version.")
            continue
        run = entry.get("run", 1)
        if isinstance(run, bool) or not isinstance(run, int) or not 1 <= run <= runs:
            errors.setdefault(f"{where}.run", []).append(f"An integer from 1 to {runs}.")
            continue
        if (entry["item"], run) in seen:
            errors.setdefault(f"{where}.run", []).append(f"Item {entry['item']} run {run} is reported twice.")
            continue
        seen.add((entry["item"], run))
        digest = entry.get("request_sha256", "")
        if not isinstance(digest, str) or len(digest) > 64:
            errors.setdefault(f"{where}.request_sha256", []).append("The request's SHA-256, hex.")
            digest = ""
        scored.append(
            _one_scored(
                items[entry["item"]], run, digest, _reply(entry.get("reply"), f"{where}.reply", errors), output_schema
            )
        )
    missing = [f"{i} run {r}" for i in items for r in range(1, runs + 1) if (i, r) not in seen]
    if missing:
        more = " ..." if len(missing) > 10 else ""
        errors.setdefault("results", []).append(f"Missing: {', '.join(missing[:10])}{more}.")
    if errors:
        raise InvalidContent("The evaluation results are not valid; see details.", errors)
    return scored


def _one_scored(
    item: dict[str, Any], run: int, digest: str, reply: dict[str, Any], output_schema: Any
) -> dict[str, Any]:
    verdicts = [scorers.score(e, reply, index=i, output_schema=output_schema) for i, e in enumerate(item["expect"])]
    return {
        "item": item["id"],
        "run": run,
        "tags": item["tags"],
        "request_sha256": digest,
        "reply": reply,
        "scores": verdicts,
        "passed": not reply["error"] and all(v["passed"] for v in verdicts),
        "error": bool(reply["error"]),
    }


@transaction.atomic
def eval_run_record(
    *,
    version: BundleVersion,
    suite_version: SuiteVersion,
    provider: str,
    model: str,
    runs: int,
    threshold: float,
    results: object,
    actor: Actor,
) -> EvalRun:
    """Score the runner's replies for every item x run, store the run, and report the
    `eval:<suite>` check on the version's content hash with its in-toto attestation."""
    if actor.role not in CHECK_REPORTERS:
        raise Forbidden("Recording an evaluation needs the ci role (or ops): it reports a check.")
    bundle = Bundle.objects.get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle.name)
    doc = content.stored(suite_version.canonical)
    if not isinstance(results, list) or len(results) > MAX_RESULTS:
        raise InvalidContent("`results` is not valid.", {"results": [f"A list of at most {MAX_RESULTS} results."]})
    output_schema = json.loads(bytes(version.canonical)).get("output_schema")
    scored = _scored(doc, results, runs=runs, output_schema=output_schema)
    passed = sum(1 for s in scored if s["passed"])
    pass_rate = passed / len(scored)
    costs = [s["reply"]["cost_usd"] for s in scored]
    run = EvalRun(
        bundle=bundle,
        version=version,
        content_hash=version.content_hash,
        suite_version=suite_version,
        provider=provider,
        model=model,
        runs=runs,
        threshold=threshold,
        total=len(scored),
        passed=passed,
        errors=sum(1 for s in scored if s["error"]),
        pass_rate=pass_rate,
        status=RunStatus.SUCCESS if pass_rate >= threshold else RunStatus.FAILURE,
        cost_usd=None if any(c is None for c in costs) else round(sum(costs), 6),
        results=scored,
        created_by=actor.name,
        created_at=timezone.now(),
    )
    run.attestation = attestation.statement(run=run, bundle=bundle, suite_doc=doc)
    run.save()
    summary = (
        f"{passed}/{len(scored)} passed ({pass_rate:.1%}, threshold {threshold:.0%}) on "
        f"{suite_version.suite.name}@{suite_version.number}, {model}, {runs} run(s) per item"
    )
    check_record(
        bundle=bundle,
        version=version,
        name=EVAL_CHECK_PREFIX + suite_version.suite.name,
        status=run.status,
        summary=summary,
        actor=actor,
        evidence={
            "run": str(run.id),
            "suite_sha256": suite_version.content_hash,
            "attestation_sha256": hashlib.sha256(attestation.statement_bytes(run.attestation)).hexdigest(),
        },
    )
    audit_record(
        actor=actor,
        action="eval.recorded",
        target_type="version",
        target=f"{bundle.name}@{version.number}",
        data={"run": str(run.id), "suite": suite_version.content_hash, "pass_rate": pass_rate, "status": run.status},
    )
    return run
