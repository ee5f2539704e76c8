"""Celery tasks of the entry-point layer: evaluation runs made by the worker (api.eval_worker),
on the deliveries queue with the other outbound calls. evals.jobs sends them by name.

A run takes seconds to minutes, longer than the broker's visibility timeout (config/settings.py),
so the message is acknowledged when the task starts (acks_late=False): a message delivered
again finds the job running and does nothing (evals.jobs.job_claim), and a run whose worker
died is marked failed by the sweep (evals.jobs.jobs_sweep)."""

from celery import shared_task

from api import eval_worker
from evals import jobs


@shared_task(name=jobs.EVAL_JOB_TASK, acks_late=False)
def eval_job_task(*, job_id: str) -> str:
    return eval_worker.job_run(job_id)


@shared_task(name="api.tasks.eval_jobs_sweep_task", acks_late=True)
def eval_jobs_sweep_task() -> int:
    return len(jobs.jobs_sweep())
