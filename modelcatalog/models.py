"""Ops' corrections and extensions of the shipped catalog (modelcatalog.data), and the
retirement notices already sent."""

from django.db import models


class ModelOverride(models.Model):
    """What ops set for one model: `facts` holds only the fields given (a field absent keeps
    the shipped value; a model the shipped data lacks is an extension), `sources` the source of
    each, as {"field": {"url", "read"}}. Written only by modelcatalog.services (audited)."""

    provider = models.CharField(max_length=50)
    name = models.CharField(max_length=200)
    facts = models.JSONField(default=dict)
    sources = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="modeloverride_unique")]

    def __str__(self) -> str:
        return f"{self.provider}/{self.name}"


class RetirementNotice(models.Model):
    """One row per (model, retirement date, threshold) whose webhook was emitted. The unique
    constraint is what makes a notice go out once: two beat processes running the sweep at the
    same moment both try the insert, one commits, the other's insert fails and it emits nothing
    (modelcatalog.services.retirement_notices_send). A new retirement date is a new row."""

    provider = models.CharField(max_length=50)
    name = models.CharField(max_length=200)
    retires_at = models.DateField()
    threshold = models.CharField(max_length=16)  # "window", "7d", "1d", "retired"
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "name", "retires_at", "threshold"], name="retirementnotice_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.name} {self.threshold} ({self.retires_at})"
