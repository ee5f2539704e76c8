"""Request shapes (type checks only; the rules live in the services) and response shapes."""

import json
from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core import limits
from registry.changes import change_state_now
from registry.contracts import LEVELS
from registry.lifecycle import pin_policy
from registry.models import BundleVersion, Compatibility
from registry.selectors import bundle_label_map, label_targets_out
from sessions_app.models import SessionStatus


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else (DRF's CharField would turn 12 into "12")."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class IdentifierField(StrictCharField):
    """A name or id, taken exactly as sent: " refunds" is not "refunds", and two external ids
    differing only in spaces must not collide on the same session."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else (DRF's would take "5", 5.0 and true)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictInput(serializers.Serializer):
    """Refuses unknown fields, so that a typo ("lable") is an error rather than ignored.

    Unknown fields are reported together with the known fields' errors, so that one
    round trip shows every problem of a request."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {name: ["Unknown field."] for name in sorted(set(data) - set(self.fields))}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class RenderIn(StrictInput):
    """The per-turn render's body (the DRF view and the fast lane both validate with it)."""

    variables = serializers.JSONField(required=False, allow_null=True)


class BundleIn(StrictInput):
    name = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    description = StrictCharField(required=False, allow_blank=True, max_length=limits.TEXT_MAX_CHARS, default="")
    when_to_use = StrictCharField(required=False, allow_blank=True, max_length=limits.TEXT_MAX_CHARS, default="")


class AuditQuery(serializers.Serializer):
    """Filters of GET /api/v1/audit/ (query parameters; all optional)."""

    action = serializers.CharField(required=False, max_length=64)
    actor = serializers.CharField(required=False, max_length=200)
    target_type = serializers.CharField(required=False, max_length=32)
    target = serializers.CharField(required=False, max_length=300)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class VersionIn(StrictInput):
    content = serializers.JSONField()
    message = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class StrictBooleanField(serializers.BooleanField):
    """true or false and nothing else (DRF's would take "yes", 1 and "on")."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class TargetIn(StrictInput):
    version = StrictIntegerField(min_value=1)
    weight = StrictIntegerField(min_value=0, max_value=100)


RETIRING_HELP = "Move to a version whose model retires within MODEL_RETIREMENT_WARNING anyway (else 409)."


class LabelIn(StrictInput):
    version = StrictIntegerField(min_value=1, required=False)
    # A percentage rollout instead of one version: weights are integers summing to 100.
    targets = TargetIn(many=True, required=False, allow_empty=False, max_length=limits.MAX_SPLIT_TARGETS)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )
    compatibility = serializers.ChoiceField(choices=Compatibility.choices, required=False)
    # A rollout guard for a split (ops; docs/operations.md#guarded-rollouts): set with the move.
    guard = serializers.JSONField(required=False)


class PinPolicyIn(StrictInput):
    """PUT of a bundle's pin policy: who may pin any version by number, and a reason."""

    pin_any_version = serializers.ListField(
        child=StrictCharField(max_length=210), max_length=pin_policy.PIN_GRANTS_MAX, allow_empty=True
    )
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class PinPolicyOut(serializers.Serializer):
    bundle = serializers.CharField(source="name")
    pin_any_version = serializers.ListField(child=serializers.CharField())


class LabelPolicyIn(StrictInput):
    """PATCH of a label's policy: any of the four fields, and a reason."""

    protected = StrictBooleanField(required=False)
    compatibility = serializers.ChoiceField(choices=Compatibility.choices, required=False)
    required_approvals = StrictIntegerField(required=False, min_value=0, max_value=limits.REQUIRED_APPROVALS_MAX)
    required_checks = serializers.ListField(
        child=StrictCharField(max_length=limits.CHECK_NAME_MAX),
        required=False,
        max_length=limits.REQUIRED_CHECKS_MAX,
    )
    # A split label's rollout guard (ops); null removes it.
    guard = serializers.JSONField(required=False, allow_null=True)
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class RollbackIn(StrictInput):
    to_version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )


class RevokeIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class SessionIn(StrictInput):
    bundle = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    # A field named like Field.label (the stubs type that attribute): a declaration, not an override.
    label = IdentifierField(required=False, allow_null=True, max_length=limits.LABEL_NAME_MAX)  # type: ignore[assignment]
    version = StrictIntegerField(required=False, allow_null=True, min_value=1)
    external_id = IdentifierField(required=False, allow_null=True, max_length=limits.EXTERNAL_ID_MAX)
    ttl_seconds = StrictIntegerField(
        required=False, allow_null=True, min_value=limits.TTL_MIN_SECONDS, max_value=limits.TTL_MAX_SECONDS
    )
    # Session-scoped variable values; checked against the pinned version by session_start.
    variables = serializers.JSONField(required=False, allow_null=True)
    # Places the session in a label's percentage rollout (e.g. the end user's id).
    routing_key = IdentifierField(required=False, allow_null=True, max_length=limits.EXTERNAL_ID_MAX)


# What SessionIn accepts without a doubt: strings as IdentifierField takes them (non-empty, at
# most so long, storable), integers within its bounds, any JSON for variables, null for all
# but the bundle.
_SESSION_IN_TEXT = {
    "bundle": limits.BUNDLE_NAME_MAX,
    "label": limits.LABEL_NAME_MAX,
    "external_id": limits.EXTERNAL_ID_MAX,
    "routing_key": limits.EXTERNAL_ID_MAX,
}
_SESSION_IN_INT = {"version": (1, 2**63 - 1), "ttl_seconds": (limits.TTL_MIN_SECONDS, limits.TTL_MAX_SECONDS)}


def _plain_session_field(name: str, value: Any) -> bool:
    if value is None:
        return name != "bundle"
    if name in _SESSION_IN_TEXT:
        return isinstance(value, str) and 0 < len(value) <= _SESSION_IN_TEXT[name] and limits.storable(value)
    if name in _SESSION_IN_INT:
        low, high = _SESSION_IN_INT[name]
        return type(value) is int and low <= value <= high
    return name == "variables"


def session_in(data: Any) -> dict[str, Any]:
    """SessionIn's validated data. A plain start body (the common case) is checked here, without
    DRF's per-instance field copies (a twentieth of a start's CPU); anything else goes through
    SessionIn, so every refusal is the serializer's own, to the byte."""
    if isinstance(data, dict) and "bundle" in data and all(_plain_session_field(k, v) for k, v in data.items()):
        return data
    serializer = SessionIn(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class CatalogEntryOut(serializers.Serializer):
    """A bundle as the capability catalog shows it; BundleOut adds the registry's own fields."""

    name = serializers.CharField()
    description = serializers.CharField()
    when_to_use = serializers.CharField()
    labels = serializers.SerializerMethodField()

    def get_labels(self, bundle) -> dict[str, int]:
        return bundle_label_map(bundle)


class BundleOut(CatalogEntryOut):
    latest_version = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class VersionOut(serializers.Serializer):
    number = serializers.IntegerField()
    content_hash = serializers.CharField()
    content = serializers.SerializerMethodField()
    message = serializers.CharField()
    author = serializers.CharField()
    created_at = serializers.DateTimeField()
    state = serializers.CharField()
    active_sessions = serializers.IntegerField()
    drained_at = serializers.DateTimeField(allow_null=True)

    def get_content(self, version) -> dict:
        # Decoded from the stored canonical bytes, so it is exactly what was published.
        return json.loads(bytes(version.canonical))


class PublishWarningOut(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()


class DependentOut(serializers.Serializer):
    """A bundle whose latest version includes this one (registry.includes)."""

    bundle = serializers.CharField()
    version = serializers.IntegerField(help_text="The including bundle's latest version.")
    marker = serializers.CharField(help_text="The marker as written, e.g. {{> tone@production}}.")
    pinned_version = serializers.IntegerField(help_text="The version of this bundle it resolved to at its publish.")
    pinned_hash = serializers.CharField(help_text="That version's content hash.")
    current_version = serializers.IntegerField(
        allow_null=True, help_text="What the marker names now (null: nothing, its next publish would fail)."
    )
    outdated = serializers.BooleanField(help_text="Its next publish would pick up other bytes.")


DEPENDENTS_HELP = f"The first {limits.DEPENDENTS_MAX} by including bundle name (GET .../dependents/ pages them all)."
DEPENDENTS_TOTAL_HELP = "How many dependents there are in all: more than `dependents` lists when truncated."


class DependentListOut(serializers.Serializer):
    bundle = serializers.CharField()
    results = DependentOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page (cursor), or null on the last.")


class PublishOut(VersionOut):
    """A publish answer: the version, what the contract checks warn about, and the bundles that
    include this one."""

    warnings = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField(
        help_text=(
            "The content's model as written (`name`) and its model-catalog entry (`catalog`: provider, name with "
            "aliases resolved, retires_at, replacement; null for a model the catalog does not know)."
        )
    )
    dependents = serializers.SerializerMethodField(help_text=DEPENDENTS_HELP)
    dependents_total = serializers.SerializerMethodField(help_text=DEPENDENTS_TOTAL_HELP)

    @extend_schema_field(PublishWarningOut(many=True))
    def get_warnings(self, version: BundleVersion) -> list[dict[str, str]]:
        # What version_publish returned, handed over by the view (not a field of the version).
        return list(self.context.get("warnings", []))

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_model(self, version: BundleVersion) -> dict[str, Any] | None:
        model: dict[str, Any] | None = self.context.get("model")
        return model

    @extend_schema_field(DependentOut(many=True))
    def get_dependents(self, version: BundleVersion) -> list[dict[str, Any]]:
        # Read by the view (registry.selectors.dependents_first), not a field of the version.
        return list(self.context.get("dependents", []))

    def get_dependents_total(self, version: BundleVersion) -> int:
        return int(self.context.get("dependents_total", 0))


class ChangeOut(serializers.Serializer):
    level = serializers.ChoiceField(choices=LEVELS)
    kind = serializers.CharField()
    path = serializers.CharField()
    message = serializers.CharField()
    tool = serializers.CharField(allow_null=True)


class DiffOut(serializers.Serializer):
    bundle = serializers.CharField()
    from_version = serializers.IntegerField()
    to_version = serializers.IntegerField()
    level = serializers.ChoiceField(choices=LEVELS)
    changes = ChangeOut(many=True)


class DiffQuery(serializers.Serializer):
    against = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1)


class TargetOut(serializers.Serializer):
    version = serializers.IntegerField()
    weight = serializers.IntegerField()


class LabelOut(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField(source="version.number", help_text="The primary target (largest weight).")
    targets = serializers.SerializerMethodField(help_text="Every target with its weight; one at 100 unless split.")
    revision = serializers.IntegerField(help_text="Changes with every change of the label; its ETag is rev-N.")
    protected = serializers.BooleanField()

    def get_targets(self, label) -> list[dict[str, int]]:
        return label_targets_out(label)

    compatibility = serializers.CharField()
    required_checks = serializers.ListField(
        child=serializers.CharField(), help_text="Checks a new target's content must have passed."
    )
    required_approvals = serializers.IntegerField()
    updated_at = serializers.DateTimeField()
    updated_by = serializers.CharField()


class LabelMovedOut(LabelOut):
    """A PUT's answer: the label, and the bundles that include its bundle by this label."""

    dependents = serializers.SerializerMethodField(help_text=DEPENDENTS_HELP)
    dependents_total = serializers.SerializerMethodField(help_text=DEPENDENTS_TOTAL_HELP)

    @extend_schema_field(DependentOut(many=True))
    def get_dependents(self, label) -> list[dict[str, Any]]:
        # Read by the view (registry.selectors.dependents_first), not a field of the label.
        return list(self.context.get("dependents", []))

    def get_dependents_total(self, label) -> int:
        return int(self.context.get("dependents_total", 0))


class LabelMoveOut(serializers.Serializer):
    from_version = serializers.IntegerField(source="previous_version.number", allow_null=True, default=None)
    to_version = serializers.IntegerField(source="version.number")
    targets = serializers.SerializerMethodField()
    release = serializers.UUIDField(allow_null=True)

    def get_targets(self, row) -> list[dict[str, int]]:
        return label_targets_out(row)

    by = serializers.CharField(source="updated_by")
    reason = serializers.CharField(source="history_change_reason", allow_null=True)
    at = serializers.DateTimeField(source="history_date")
    note = serializers.CharField(source="move_note")
    kind = serializers.CharField(source="change_kind", help_text='"move", or "policy" for a change of its policy.')
    protected = serializers.BooleanField()
    compatibility = serializers.CharField()
    required_checks = serializers.ListField(child=serializers.CharField())
    required_approvals = serializers.IntegerField()


class SessionOut(serializers.Serializer):
    id = serializers.UUIDField()
    bundle = serializers.CharField(source="bundle.name")
    version = serializers.IntegerField(source="version.number")
    content_hash = serializers.CharField(source="version.content_hash")
    label = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # see SessionIn.label
    status = serializers.SerializerMethodField()
    started_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    external_id = serializers.CharField(allow_null=True)
    variables = serializers.JSONField()

    def get_status(self, session) -> str:
        return session_status(session)


def session_status(session) -> str:
    # A lease that ran out is expired now, even before the sweep writes it down.
    if session.status == SessionStatus.ACTIVE and session.expires_at <= timezone.now():
        return SessionStatus.EXPIRED
    return session.status


def _datetime_out(value: Any) -> str | None:
    """What serializers.DateTimeField renders: ISO 8601 in the current time zone, UTC as Z."""
    if not value:
        return None
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def session_out(session) -> dict[str, Any]:
    """SessionOut(session).data, built directly: DRF deep-copies a serializer's fields on every
    instance, which was a sixth of a session start's CPU. The same keys, order and values
    (tests/edge/test_fastlane.py compares both, and the fast lane's bytes with the DRF view's)."""
    return {
        "id": str(session.pk),
        "bundle": session.bundle.name,
        "version": session.version.number,
        "content_hash": session.version.content_hash,
        "label": session.label,
        "status": session_status(session),
        "started_at": _datetime_out(session.started_at),
        "last_seen_at": _datetime_out(session.last_seen_at),
        "expires_at": _datetime_out(session.expires_at),
        "ended_at": _datetime_out(session.ended_at),
        "external_id": session.external_id,
        "variables": session.variables,
    }


class AuditEventOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    actor = serializers.CharField()
    action = serializers.CharField()
    target_type = serializers.CharField()
    target = serializers.CharField()
    reason = serializers.CharField()
    data = serializers.DictField()  # type: ignore[assignment]  # the event's field, not Serializer.data
    request_id = serializers.CharField()
    client_ip = serializers.CharField(allow_null=True)


class VersionUsageOut(serializers.Serializer):
    bundle = serializers.CharField()
    version = serializers.IntegerField()
    sessions_started = serializers.IntegerField()
    sessions_active = serializers.IntegerField()
    fetches = serializers.IntegerField(help_text="Pinned-bundle fetches (200 and 304), counted within about 5 s.")
    first_used_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


class ReleaseMoveIn(StrictInput):
    bundle = IdentifierField(max_length=limits.BUNDLE_NAME_MAX)
    label = IdentifierField(max_length=limits.LABEL_NAME_MAX)  # type: ignore[assignment]  # a field named label
    version = StrictIntegerField(min_value=1, required=False)
    targets = TargetIn(many=True, required=False, allow_empty=False, max_length=limits.MAX_SPLIT_TARGETS)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    if_match = StrictCharField(required=False, max_length=100, help_text="The label's ETag, as If-Match.")


class ReleaseIn(StrictInput):
    moves = ReleaseMoveIn(many=True, allow_empty=False, max_length=limits.RELEASE_MAX_MOVES)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_breaking = StrictBooleanField(required=False, default=False)
    allow_retiring = StrictBooleanField(
        required=False,
        default=False,
        help_text=RETIRING_HELP,
    )
    dry_run = StrictBooleanField(required=False, default=False)


class ReleaseRollbackIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)
    allow_retiring = StrictBooleanField(required=False, default=False, help_text=RETIRING_HELP)


class ReleaseOut(serializers.Serializer):
    id = serializers.UUIDField()
    reason = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    allow_breaking = serializers.BooleanField()
    items = serializers.JSONField(
        help_text="Per label: bundle, label, before and after ({version, targets, revision, etag})."
    )
    rollback_of = serializers.UUIDField(source="rollback_of_id", allow_null=True)
    rolled_back_by = serializers.SerializerMethodField()

    def get_rolled_back_by(self, release) -> str | None:
        back = getattr(release, "rolled_back_by", None)
        return str(back.pk) if back is not None else None


class ReleasePreviewOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    moves = serializers.JSONField(
        help_text="Per move: current, becomes_live, leaving (draining, sessions), compatibility, allowed."
    )


class ChangeApprovalOut(serializers.Serializer):
    approver = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class ChangeRequestOut(serializers.Serializer):
    """A change request (registry.changes): a move or release waiting for required approvals."""

    id = serializers.UUIDField()
    kind = serializers.CharField(help_text='"move" or "release".')
    state = serializers.SerializerMethodField(help_text="pending, applied, rejected, expired or failed.")
    request = serializers.JSONField(help_text="The request as made: bundle, label, targets (or moves), ...")
    revisions = serializers.JSONField(help_text="Each label's revision when requested: [{bundle, label, revision}].")
    required_approvals = serializers.IntegerField(
        source="required", help_text="Approvals needed (by identities other than the requester)."
    )
    approver_role = serializers.CharField()
    requester = serializers.CharField()
    reason = serializers.CharField()
    approvals = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField()
    decided_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.JSONField(help_text="applied: the label's state or the release id; failed: code, message.")

    def get_state(self, change) -> str:
        return change_state_now(change)

    @extend_schema_field(ChangeApprovalOut(many=True))
    def get_approvals(self, change) -> list[dict[str, Any]]:
        return list(ChangeApprovalOut(change.approvals.all(), many=True).data)


class ChangeRequestedOut(serializers.Serializer):
    """The 202 of a move or release that became a change request."""

    change = ChangeRequestOut()


class ChangeDecisionIn(StrictInput):
    reason = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class ChangeQuery(serializers.Serializer):
    """Filters of GET /api/v1/changes/ (query parameters)."""

    state = serializers.ChoiceField(choices=["pending", "applied", "rejected", "expired", "failed"], required=False)
