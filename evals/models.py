"""Evaluation suites (immutable, content-addressed, like bundles) and the runs that score a
bundle version against one of them. A run's summary is a check on the version's content hash
(`eval:<suite>`), so a label's `required_checks` can ask for it."""

import uuid

from django.db import models

from registry.models import Bundle, BundleVersion

SUITE_NAME_MAX = 59  # "eval:" + the name fits a check name (core.limits.CHECK_NAME_MAX, 64)
SUITE_NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,58}$"


class Suite(models.Model):
    """A named set of evaluation items; its content lives in its versions."""

    name = models.CharField(max_length=SUITE_NAME_MAX, unique=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SuiteVersion(models.Model):
    """One published suite document. A trigger (migration 0001) refuses any UPDATE of its bytes,
    hash, number or authorship, and any DELETE, as for bundle versions."""

    suite = models.ForeignKey(Suite, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    canonical = models.BinaryField()
    content_hash = models.CharField(max_length=64)
    message = models.TextField()
    author = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["suite_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["suite", "number"], name="suite_version_number_unique"),
            models.UniqueConstraint(fields=["suite", "content_hash"], name="suite_version_content_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.suite_id}@{self.number}"


class RunStatus(models.TextChoices):
    SUCCESS = "success"  # the pass rate met the threshold
    FAILURE = "failure"


class EvalRun(models.Model):
    """One evaluation of a bundle version's content on a suite version: every item, `runs` times,
    each reply scored here (the scorers run on the stored replies, not on a client's verdict).
    Append-only: a new run is a new row."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    content_hash = models.CharField(max_length=64)
    suite_version = models.ForeignKey(SuiteVersion, on_delete=models.PROTECT, related_name="runs")
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    runs = models.PositiveSmallIntegerField()
    threshold = models.FloatField()
    total = models.PositiveIntegerField()
    passed = models.PositiveIntegerField()
    errors = models.PositiveIntegerField()
    pass_rate = models.FloatField()
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    cost_usd = models.FloatField(null=True, blank=True)
    results = models.JSONField()  # [{item, run, request_sha256, reply, scores: [...], passed, ...}]
    attestation = models.JSONField()  # the in-toto Statement (evals.attestation)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["bundle", "content_hash", "-created_at"], name="evalrun_content_idx")]

    def __str__(self) -> str:
        return f"run {self.id}"


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # the run is recorded (its own status says whether it passed)
    STOPPED = "stopped"  # the day's budget ran out part way: nothing recorded
    FAILED = "failed"  # it could not run (the worker lost, the provider gone from EVAL_PROVIDERS)


class EvalJob(models.Model):
    """A run the worker makes (POST .../evals/start/, or the admin): what to run, who asked, and
    where it stands; once done, `run` is the recorded EvalRun. Never holds a provider key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    suite_version = models.ForeignKey(SuiteVersion, on_delete=models.PROTECT, related_name="jobs")
    provider = models.CharField(max_length=40)  # a name of EVAL_PROVIDERS
    model = models.CharField(max_length=200)
    runs = models.PositiveSmallIntegerField()
    threshold = models.FloatField()
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    detail = models.TextField(blank=True, default="")
    done = models.PositiveIntegerField(default=0)  # item runs answered so far
    total = models.PositiveIntegerField()
    spent_usd = models.FloatField(default=0.0)
    run = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # Who asked: the actor the run is recorded as (name, role, bundle scopes).
    created_by = models.CharField(max_length=200)
    created_role = models.CharField(max_length=16)
    created_scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="evaljob_status_idx")]

    def __str__(self) -> str:
        return f"job {self.id}"


class ProviderSpend(models.Model):
    """What the registry's own model calls (worker runs, the playground) cost, per UTC day and
    provider: the day's total is held against EVAL_DAILY_BUDGET_USD."""

    day = models.DateField()
    provider = models.CharField(max_length=40)
    spent_usd = models.FloatField(default=0.0)
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "provider"], name="provider_spend_day_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.provider}"
