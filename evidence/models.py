"""What sessions report about how they went, and the rollups the evidence reads.

Raw rows, one per session event (pruned with their session by retention.services):
`SessionOutcome` (the end's outcome) and `Score` (named scores). Rollups, per version, label
(the arm a session started through; "" for a session pinned by version) and UTC day, never
pruned: `EvidenceDay` (outcome counts, and the per-turn usage, tokens, cost and tool results
that evidence.counts adds up in memory and upserts in batches) and `ScoreDay` (n, sum and sum
of squares of each named score). Reading a version's evidence sums its rollup rows: the same
cost at 5 M sessions as at 5 thousand."""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from core import limits
from registry.models import BundleVersion
from sessions_app.models import Session


class Outcome(models.TextChoices):
    RESOLVED = "resolved"
    ESCALATED = "escalated"
    ABANDONED = "abandoned"
    FAILED = "failed"


class SessionOutcome(models.Model):
    """How a session went, as its end reported it. One per session; a second end with the same
    status changes nothing, with another status is refused (409)."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, primary_key=True, related_name="outcome")
    status = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.TextField(blank=True, default="")
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.session_id}: {self.status}"


class Score(models.Model):
    """A named score of a session (a user's thumbs, a judge's verdict, a human review).
    `client_id`: the idempotency id the client sent; the same id again changes nothing."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="scores")
    client_id = models.CharField(max_length=limits.EXTERNAL_ID_MAX, null=True, blank=True)  # noqa: DJ001 (absent, not empty)
    name = models.CharField(max_length=100)
    value = models.FloatField()
    source = models.CharField(max_length=100, blank=True, default="")
    comment = models.TextField(blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "client_id"],
                condition=models.Q(client_id__isnull=False),
                name="score_client_id_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}: {self.name}={self.value}"


class EvidenceDay(models.Model):
    """One version's evidence through one label on one UTC day (the rollup the evidence reads)."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=limits.LABEL_NAME_MAX, blank=True, default="")
    day = models.DateField()
    # Several rows per version, label and day: an end with an outcome adds to the row of its
    # session's shard (evidence.counts.OUTCOME_SHARDS) in its transaction, so ends at once
    # rarely wait on one row lock; the batched usage goes to shard 0; reads sum every row.
    shard = models.PositiveSmallIntegerField(default=0, db_default=0)
    # Sessions that ended with an outcome, and how many of each.
    outcomes = models.BigIntegerField(default=0)
    resolved = models.BigIntegerField(default=0)
    escalated = models.BigIntegerField(default=0)
    abandoned = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    # Turn calls, and the sessions whose first turn call it was (turns and cost per session).
    turns = models.BigIntegerField(default=0)
    turn_sessions = models.BigIntegerField(default=0)
    # Turns that reported usage, and the sums of what they reported.
    usage_turns = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    # Turns with a known price (evidence.pricing), their cost in USD, and its sum of squares.
    priced_turns = models.BigIntegerField(default=0)
    input_cost = models.FloatField(default=0.0)
    output_cost = models.FloatField(default=0.0)
    cost_sq = models.FloatField(default=0.0)
    # Tool results the turns' messages added, and the errors among them.
    tool_results = models.BigIntegerField(default=0)
    tool_errors = models.BigIntegerField(default=0)
    # Reported latency histogram (evidence.counts.latency_bucket, milliseconds).
    latency_buckets = ArrayField(models.BigIntegerField(), default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "label", "day", "shard"], name="evidenceday_unique")]

    def __str__(self) -> str:
        return f"evidence of version {self.version_id} via {self.label or '-'} on {self.day}"


class ScoreDay(models.Model):
    """One named score of one version through one label on one UTC day."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=limits.LABEL_NAME_MAX, blank=True, default="")
    day = models.DateField()
    name = models.CharField(max_length=100)
    n = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0)
    total_sq = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "label", "day", "name"], name="scoreday_unique")]

    def __str__(self) -> str:
        return f"{self.name} of version {self.version_id} via {self.label or '-'} on {self.day}"


class GuardState(models.TextChoices):
    WATCHING = "watching"  # judged on every round
    PAUSED = "paused"  # ops paused it: not judged until resumed
    HELD = "held"  # a metric was worse and the action was `hold`: weights frozen
    ROLLED_BACK = "rolled_back"  # a metric was worse and the new arm went to weight 0
    PROMOTED = "promoted"  # the last step reached: the label targets the new version alone
    BLOCKED = "blocked"  # the action was refused (a policy, approvals): needs a person
    ENDED = "ended"  # the label no longer holds the guarded split (a person moved it)


class RolloutGuard(models.Model):
    """A guard on a split label (evidence.rollouts): the metrics it watches with the regression
    each tolerates, the minimum ended sessions per arm, its action and optional promote steps.
    One per label; the worker judges it every ROLLOUT_GUARD_INTERVAL seconds."""

    label = models.OneToOneField("registry.Label", on_delete=models.CASCADE, related_name="guard")
    baseline = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    candidate = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    spec = models.JSONField()
    state = models.CharField(max_length=16, choices=GuardState.choices, default=GuardState.WATCHING)
    step = models.PositiveSmallIntegerField(default=0)  # index into spec["promote_steps"]
    # Ended sessions per arm when the current step began: each step needs its own minimum.
    step_base = models.JSONField(default=dict)
    since = models.DateField()  # the first UTC day of evidence it judges (rollups are per day)
    last_judged_at = models.DateTimeField(null=True, blank=True)
    last_verdict = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    def __str__(self) -> str:
        return f"guard of {self.label_id}: {self.state}"
