"""An evaluation run made by the worker (evals.jobs queues it; api.tasks runs it): the path
`promptreg eval run` takes, on the server. Each item runs `runs` times, a few at once: a session
pinned to the version (sessions_app's session start), one turn call with the provider's format
(turns.compose.turn_for_session, the function the endpoint answers with, so rendering, routing
and compaction are what production gets), the returned `request` sent with the provider's official
SDK (evals.provider_calls, the module the CLI ships a copy of), the session ended. A provider
error or time-out marks that reply `error` and the run goes on. Then the replies are recorded as
the CLI's are (evals.services.eval_run_record, as the actor who asked), which scores them and
reports `eval:<suite>`.

It sits in the entry-point layer, above turns/ (which evals, a feature app, may not import).
The sessions are started by a keyless ops actor named after the job (`eval:<job id>`), within
the asking key's bundle scopes: a ci key, which may ask for a run, holds no sessions itself. On
a bundle whose labels govern pins by number, grant `role:ops` pin_any_version, as the CLI's key
needs its own grant (docs/evals.md)."""

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections

from access.actors import Actor
from access.roles import Role
from evals import content, jobs, services
from evals.endpoints import Provider
from evals.models import EvalJob, JobStatus
from evals.provider_calls import CALLERS, judge_question, judge_verdict, request_sha256
from evidence.pricing import input_output
from registry.models import BundleVersion
from sessions_app.services import session_end, session_start
from turns.compose import turn_for_session
from turns.request import parse

logger = logging.getLogger(__name__)
CONCURRENCY = 4  # model calls at once in one run


@dataclass
class WorkerRunner:
    job: EvalJob
    provider: Provider
    prices: jobs.Prices
    sessions: Actor
    spent: float = 0.0
    done: int = 0
    stopped: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    judges: dict[tuple[str, str], BundleVersion | None] = field(default_factory=dict)

    def _turn(self, version: BundleVersion, messages: list[dict[str, Any]], given: dict[str, Any]) -> dict[str, Any]:
        session, _ = session_start(
            bundle=version.bundle,
            actor=self.sessions,
            version=version,
            variables=given.get("variables") or None,
            evaluation=True,  # a candidate is evaluated as often as needed: it stays unreleased
        )
        try:
            body: dict[str, Any] = {"messages": messages, "format": self.provider.format}
            if given.get("turn_variables"):
                body["variables"] = given["turn_variables"]
            if self.provider.model:
                body["model"] = self.provider.model
            turn = turn_for_session(session=session, actor=self.sessions, request=parse(body))
        finally:
            session_end(session=session, actor=self.sessions)
        return self._send(turn["request"])

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        began = time.monotonic()
        reply = CALLERS[self.provider.format](
            request, self.provider.base_url, float(settings.EVAL_CALL_TIMEOUT), self.provider.api_key()
        )
        reply["latency_ms"] = int((time.monotonic() - began) * 1000)
        reply["cost_usd"] = jobs.cost_of(self.prices, reply["usage"])
        jobs.spend_add(provider=self.provider.name, usd=reply["cost_usd"])
        reply["request_sha256"] = request_sha256(request)
        return reply

    def _judge(self, expectation: dict[str, Any], messages: list[dict[str, Any]], reply: dict[str, Any]) -> Any:
        key = (expectation["bundle"], expectation["content_hash"])
        if key not in self.judges:
            self.judges[key] = (
                BundleVersion.objects.filter(bundle__name=key[0], content_hash=key[1]).select_related("bundle").first()
            )
        judge = self.judges[key]
        if judge is None:
            return {"score": None, "reason": f"the judge {key[0]} has no version {key[1][:12]}"}
        verdict = self._turn(judge, judge_question(messages, reply), {})
        with self.lock:
            self.spent += verdict["cost_usd"]
        return judge_verdict(verdict["text"])

    def _over_budget(self) -> bool:
        with self.lock:
            if not self.stopped and jobs.budget_left() <= 0:
                self.stopped = (
                    f"stopped: the day's budget (EVAL_DAILY_BUDGET_USD {settings.EVAL_DAILY_BUDGET_USD} USD) is "
                    f"spent; nothing was recorded ({self.spent:.4f} USD spent by this run)"
                )
            return bool(self.stopped)

    def one(self, item: dict[str, Any], run: int) -> dict[str, Any]:
        try:
            if self._over_budget():
                return {"item": item["id"], "run": run, "skipped": True}
            messages = item["input"]["messages"]
            try:
                reply = self._turn(self.job.version, messages, item["input"])
                judges = {
                    str(i): self._judge(e, messages, reply)
                    for i, e in enumerate(item["expect"])
                    if e["type"] == "judge"
                }
                if judges:
                    reply["judges"] = {k: v for k, v in judges.items() if v["score"] is not None}
            except Exception as exc:  # noqa: BLE001 - any provider, network or turn failure marks the item `error`
                reply = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
            digest = reply.pop("request_sha256", "")
            with self.lock:
                self.spent += reply.get("cost_usd") or 0.0
                self.done += 1
                jobs.job_progress(self.job, done=self.done, spent=self.spent)
            return {"item": item["id"], "run": run, "request_sha256": digest, "reply": reply}
        finally:
            connections.close_all()  # this pool thread's own connections


def job_run(job_id: str) -> str:
    """Run a queued job once (a redelivered message finds it running: nothing happens); its end
    state is the job's status: done (the run recorded), stopped (budget), failed (why)."""
    job = jobs.job_claim(job_id)
    if job is None:
        return "not queued"
    runner = None
    try:
        provider = jobs.provider_get(job.provider)
        prices = jobs.require_price(job.model, input_output(job.model))
        sessions = Actor(name=f"eval:{job.id}", role=Role.OPS, scopes=tuple(job.created_scopes or ()))
        runner = WorkerRunner(job=job, provider=provider, prices=prices, sessions=sessions)
        items = content.stored(job.suite_version.canonical)["items"]
        pairs = [(item, run) for item in items for run in range(1, job.runs + 1)]
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            results = list(pool.map(lambda pair: runner.one(*pair), pairs))
        if runner.stopped:
            jobs.job_finish(job, status=JobStatus.STOPPED, detail=runner.stopped, spent=runner.spent)
            return JobStatus.STOPPED
        recorded = services.eval_run_record(
            version=job.version,
            suite_version=job.suite_version,
            provider=job.provider,
            model=job.model,
            runs=job.runs,
            threshold=job.threshold,
            results=results,
            actor=jobs.job_actor(job),
        )
    except Exception as exc:  # noqa: BLE001 - whatever stopped it is the job's answer
        logger.warning("evaluation job %s failed: %s", job_id, type(exc).__name__)
        detail = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        jobs.job_finish(job, status=JobStatus.FAILED, detail=str(detail), spent=runner.spent if runner else 0.0)
        return JobStatus.FAILED
    jobs.job_finish(job, status=JobStatus.DONE, run=recorded, spent=runner.spent)
    return JobStatus.DONE
