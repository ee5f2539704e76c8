"""Per-session skill state: one row per routed turn, and the session's own (L3) skill cards.

Both hang off the session (deleted with it) and are written only by skills.services."""

from django.db import models

from registry.models import BundleVersion
from sessions_app.models import Session

SESSION_SKILL_IDLE_TURNS = 10  # an L3 card lapses after this many routed turns without being invoked


class SkillTurn(models.Model):
    """One routed turn of a session: what was loaded, how long routing took, and (once the
    client reports it) what the model invoked. The per-version metrics read these rows."""

    # No index of its own on either key: skill_turn_unique_number leads with the session, and
    # skill_turn_version_idx is the version's (each index is one more write on every turn).
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="skill_turns", db_index=False)
    # Denormalised from the session (which never changes version) so metrics need no join.
    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+", db_index=False)
    number = models.PositiveIntegerField()
    resident = models.JSONField(default=list)
    routed = models.JSONField(default=list)
    session_skills = models.JSONField(default=list)
    invoked = models.JSONField(null=True, blank=True)  # null until POST .../turns/ reports the turn
    # The skills the turn needed, when the report carries a label (review, evaluation); else null.
    expected = models.JSONField(null=True, blank=True)
    latency_us = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "-number"]
        constraints = [models.UniqueConstraint(fields=["session", "number"], name="skill_turn_unique_number")]
        indexes = [models.Index(fields=["version"], name="skill_turn_version_idx")]

    def __str__(self) -> str:
        return f"{self.session_id} turn {self.number}"


class SessionSkill(models.Model):
    """A temporary (L3) card registered by one session, visible to that session only. It lapses
    after SESSION_SKILL_IDLE_TURNS routed turns without being invoked, and when the session ends."""

    # session_skill_unique_name leads with the session: no index of its own
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="session_skills", db_index=False)
    name = models.CharField(max_length=64)
    summary = models.CharField(max_length=60)
    description = models.TextField()
    source = models.CharField(max_length=200)
    registered_turn = models.PositiveIntegerField()
    last_invoked_turn = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "name"]
        constraints = [models.UniqueConstraint(fields=["session", "name"], name="session_skill_unique_name")]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.name}"

    @property
    def last_active_turn(self) -> int:
        return max(self.registered_turn, self.last_invoked_turn or 0)
