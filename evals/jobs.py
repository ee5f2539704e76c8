"""Runs the worker makes (docs/evals.md#runs-made-by-the-worker) and what the registry's own model
calls spend. The services here check and write; the run itself (sessions, turn calls, the
provider's SDK) is api.eval_worker, in the entry-point layer, since the turn call composes two
feature apps. Each service owns its transaction.

Spending is held against EVAL_DAILY_BUDGET_USD per UTC day, all providers together, by the model
catalog's prices: a run starts only when its upper estimate fits in what is left of the day, and
stops (recording nothing) once the day's spending reaches the budget; the playground refuses a
call once it is reached. A model the catalog has no price for is refused: nothing could count it."""

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from access.actors import Actor
from access.permissions import require_bundle_scope
from audit.services import audit_record
from core import enqueue
from core.errors import Conflict, Forbidden, InvalidContent
from evals import content
from evals.endpoints import Provider
from evals.models import EvalJob, EvalRun, JobStatus, ProviderSpend, SuiteVersion
from evals.services import MAX_RUNS, eval_plan
from modelcatalog.selectors import model_get
from registry.checks import CHECK_REPORTERS
from registry.models import Bundle, BundleVersion

EVAL_JOB_TASK = "api.tasks.eval_job_task"
REQUEUE_AFTER = timedelta(seconds=30)  # a queued job not started by then is sent again
LOST_AFTER = timedelta(hours=2)  # a running job not finished by then lost its worker
OUTPUT_TOKENS_PER_CALL = 1_000  # the estimate's output, per call (a reply rarely says more)
Prices = tuple[float, float]  # USD per million input and output tokens


class BudgetSpent(Conflict):
    code = "budget_spent"


def provider_get(name: object) -> Provider:
    """The configured provider `name`, or 400 listing what is configured (or saying none is)."""
    configured: dict[str, Provider] = settings.EVAL_PROVIDERS
    if not configured:
        raise InvalidContent(
            "The registry calls no model provider: an operator names them in EVAL_PROVIDERS (docs/operations.md).",
            {"provider": ["No provider is configured."]},
        )
    if not isinstance(name, str) or name not in configured:
        raise InvalidContent("Unknown provider.", {"provider": [f"One of {', '.join(sorted(configured))}."]})
    provider = configured[name]
    if provider.key_missing():
        raise InvalidContent(
            f"Provider {name!r} has no key: {provider.key_env} is not set in the registry's environment.",
            {"provider": [f"{provider.key_env} is not set."]},
        )
    return provider


def model_of(version: BundleVersion, provider: Provider) -> str:
    """The model a call sends: the provider's fixed model, else the version's."""
    name = provider.model or (json.loads(bytes(version.canonical)).get("model") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise InvalidContent("No model to call.", {"model": ["The version names no model and the provider none."]})
    return name


def require_price(model: str, prices: Prices | None) -> Prices:
    if prices is None:
        raise InvalidContent(
            f"The model catalog has no price for {model}: the registry calls only models whose cost it can "
            "hold against EVAL_DAILY_BUDGET_USD. Add the price (PUT /api/v1/models/{provider}/{name}/).",
            {"model": [f"No price for {model}."]},
        )
    return prices


def require_unretired(model: str) -> None:
    """A model the catalog says has retired is refused before the run is queued: the provider
    would refuse every call, and the run would record nothing but errors."""
    info = model_get(provider=None, name=model)
    if info is not None and info.retired():
        instead = f"; its replacement is {info.replacement}" if info.replacement else ""
        raise InvalidContent(
            f"{model} retired on {info.retires_at}: its provider no longer serves it{instead}.",
            {"model": [f"{model} retired on {info.retires_at}."]},
        )


def cost_of(prices: Prices, usage: dict[str, Any]) -> float:
    return (int(usage.get("input_tokens", 0)) * prices[0] + int(usage.get("output_tokens", 0)) * prices[1]) / 1e6


def estimate(items: list[dict[str, Any]], runs: int, prices: Prices) -> float:
    """An upper estimate, as the CLI's: each item's text as input (4 characters a token, and
    2,000 tokens for the system prompt) and OUTPUT_TOKENS_PER_CALL a call."""
    calls = len(items) * runs
    tokens_in = sum(len(json.dumps(i["input"]["messages"])) // 4 + 2_000 for i in items) * runs
    return cost_of(prices, {"input_tokens": tokens_in, "output_tokens": OUTPUT_TOKENS_PER_CALL * calls})


def spent_today() -> float:
    total = ProviderSpend.objects.filter(day=timezone.now().date()).aggregate(s=Sum("spent_usd"))["s"]
    return float(total or 0.0)


def budget_left() -> float:
    return max(0.0, float(settings.EVAL_DAILY_BUDGET_USD) - spent_today())


def require_budget(needed: float = 0.0) -> None:
    left = budget_left()
    if left <= 0 or needed > left:
        raise BudgetSpent(
            f"The day's budget for the registry's model calls is spent or too small: {left:.4f} USD left of "
            f"{settings.EVAL_DAILY_BUDGET_USD} (EVAL_DAILY_BUDGET_USD), {needed:.4f} USD needed at most.",
            {"budget": [f"{left:.4f} USD left today (UTC)."]},
        )


def spend_add(*, provider: str, usd: float) -> None:
    """Count one call's cost against today's budget (one upsert, safe from many threads)."""
    day = timezone.now().date()
    updated = ProviderSpend.objects.filter(day=day, provider=provider).update(
        spent_usd=F("spent_usd") + usd, calls=F("calls") + 1
    )
    if not updated:
        _, created = ProviderSpend.objects.get_or_create(
            day=day, provider=provider, defaults={"spent_usd": usd, "calls": 1}
        )
        if not created:
            ProviderSpend.objects.filter(day=day, provider=provider).update(
                spent_usd=F("spent_usd") + usd, calls=F("calls") + 1
            )


@transaction.atomic
def playground_call_record(
    *,
    actor: Actor,
    bundle_name: str,
    version_number: int | None,
    content_hash: str,
    provider: Provider,
    model: str,
    usage: dict[str, Any] | None,
    cost: float,
    error: str = "",
) -> None:
    """One model call the playground made: counted against the day's budget (when it was
    answered) and audited with who, what (the version, or the draft by its content hash), where
    and what it cost. Never the key or the conversation: `error` is the exception's type only,
    as a provider's message may quote the request."""
    if not error:
        spend_add(provider=provider.name, usd=cost)
    usage = usage or {}
    audit_record(
        actor=actor,
        action="playground.called",
        target_type="version" if version_number is not None else "draft",
        target=f"{bundle_name}@{version_number}" if version_number is not None else bundle_name,
        data={
            "content_hash": content_hash,
            "provider": provider.name,
            "format": provider.format,
            "model": model,
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
            "cached_tokens": int(usage.get("cached_tokens", 0)),
            "cost_usd": round(cost, 6),
            **({"error": error} if error else {}),
        },
    )


@transaction.atomic
def job_start(
    *,
    version: BundleVersion,
    suite_version: SuiteVersion,
    provider_name: object,
    runs: int,
    threshold: float,
    actor: Actor,
    price_of: Callable[[str], Prices | None],
) -> EvalJob:
    """Check everything a run needs before the worker gets it, all at once where they are
    content problems (items the version cannot take), then queue it: 403 for a role that may
    not report checks (ci, ops, admin may), 400 for an unknown provider, an item problem or a
    model without a price, 409 `budget_spent` when the estimate does not fit the day's budget.
    `price_of`: the catalog's prices of a model (the caller's evidence.pricing lookup)."""
    if actor.role not in CHECK_REPORTERS:
        raise Forbidden("Running an evaluation needs the ci role (or ops): its result is a check.")
    bundle = Bundle.objects.get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle.name)
    provider = provider_get(provider_name)
    if not 1 <= runs <= MAX_RUNS or not 0 <= threshold <= 1:
        raise InvalidContent("runs or threshold out of range.", {"runs": [f"1 to {MAX_RUNS}"], "threshold": ["0-1"]})
    problems = eval_plan(version=version, suite_version=suite_version)
    if problems:
        raise InvalidContent(f"{len(problems)} item(s) cannot run on this version.", {"items": problems})
    model = model_of(version, provider)
    require_unretired(model)
    items = content.stored(suite_version.canonical)["items"]
    require_budget(estimate(items, runs, require_price(model, price_of(model))))
    job = EvalJob.objects.create(
        version=version,
        suite_version=suite_version,
        provider=provider.name,
        model=model,
        runs=runs,
        threshold=threshold,
        total=len(items) * runs,
        created_by=actor.name,
        created_role=actor.role,
        created_scopes=list(actor.scopes),
    )
    audit_record(
        actor=actor,
        action="eval.queued",
        target_type="version",
        target=f"{bundle.name}@{version.number}",
        data={"job": str(job.id), "suite": suite_version.content_hash, "provider": provider.name, "model": model},
    )
    transaction.on_commit(lambda: enqueue.send(EVAL_JOB_TASK, what="an evaluation run", job_id=str(job.id)))
    return job


def job_actor(job: EvalJob) -> Actor:
    """Who the run is recorded as: the actor that asked for it."""
    return Actor(name=job.created_by, role=job.created_role, scopes=tuple(job.created_scopes or ()))


def job_claim(job_id: str) -> EvalJob | None:
    """Queued -> running, once: a message delivered twice finds it running and does nothing."""
    claimed = EvalJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return None
    return EvalJob.objects.select_related("version__bundle", "suite_version__suite").get(pk=job_id)


def job_progress(job: EvalJob, *, done: int, spent: float) -> None:
    EvalJob.objects.filter(pk=job.pk).update(done=done, spent_usd=spent)


def job_finish(job: EvalJob, *, status: str, detail: str = "", run: EvalRun | None = None, spent: float = 0.0) -> None:
    EvalJob.objects.filter(pk=job.pk).update(
        status=status, detail=detail[:2000], run=run, spent_usd=spent, finished_at=timezone.now()
    )


def jobs_sweep() -> list[str]:
    """Jobs queued longer than REQUEUE_AFTER (their message lost: sent again, returned) and
    running longer than LOST_AFTER (their worker gone: marked failed)."""
    now = timezone.now()
    EvalJob.objects.filter(status=JobStatus.RUNNING, started_at__lt=now - LOST_AFTER).update(
        status=JobStatus.FAILED, detail="the worker running it was lost; start it again", finished_at=now
    )
    stale = EvalJob.objects.filter(status=JobStatus.QUEUED, created_at__lt=now - REQUEUE_AFTER)
    ids = [str(i) for i in stale.values_list("id", flat=True)[:100]]
    for job_id in ids:
        enqueue.send(EVAL_JOB_TASK, what="an evaluation run", job_id=job_id)
    return ids
