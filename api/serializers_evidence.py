"""The In and Out schemas of the evidence's endpoints (docs/api.md#evidence): the end's outcome,
scores, rollout guards. The rules behind them are evidence's (evidence.services, rollouts)."""

from rest_framework import serializers

from api.serializers import StrictCharField, StrictInput


class EndIn(StrictInput):
    """An end's optional body: `outcome` {"status", "reason"?} (checked by
    evidence.services.outcome_in). No body, or an empty object, is a plain end."""

    outcome = serializers.JSONField(required=False, allow_null=True)


class ScoreIn(StrictInput):
    """A score's body (checked by evidence.services.score_in, which both lanes call)."""

    name = serializers.CharField(max_length=100)
    value = serializers.FloatField()
    # `source`: a field named like Field.source (the stubs type that attribute): a declaration.
    source = serializers.CharField(required=False, max_length=100)  # type: ignore[assignment]
    comment = serializers.CharField(required=False, max_length=4000)
    id = serializers.CharField(required=False, max_length=200)


class ScoreOut(serializers.Serializer):
    id = serializers.CharField()
    session = serializers.UUIDField()
    name = serializers.CharField()
    value = serializers.FloatField()
    source = serializers.CharField()  # type: ignore[assignment]  # see ScoreIn.source
    comment = serializers.CharField()
    at = serializers.DateTimeField()


class GuardIn(serializers.Serializer):
    """A rollout guard (checked by evidence.rollouts.guard_spec; docs/operations.md)."""

    metrics = serializers.JSONField()
    min_sessions = serializers.IntegerField(required=False)
    action = serializers.ChoiceField(choices=["hold", "rollback"], required=False)
    promote_steps = serializers.ListField(child=serializers.IntegerField(), required=False)
    reason = serializers.CharField()


class GuardOverrideIn(StrictInput):
    action = serializers.ChoiceField(choices=["pause", "resume", "acknowledge"])
    reason = StrictCharField(max_length=1000)
