"""Bundles, their immutable versions, and the labels that point at them."""

import uuid
from collections.abc import Callable

from django.contrib.postgres.fields import ArrayField
from django.db import models
from simple_history.models import HistoricalRecords

from core import limits


class Bundle(models.Model):
    """A named agent configuration; its content lives in its versions."""

    name = models.CharField(max_length=limits.BUNDLE_NAME_MAX, unique=True)
    description = models.TextField(blank=True, default="")
    # Shown in the capability catalog: when an agent should pick this bundle (a sentence or two).
    when_to_use = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    # Ops' choice for agents that forward end-user text (issue 36): the turn call refuses
    # `system`/`developer` messages in the conversation, and session string variables must be
    # short single-line values without template braces (registry.guard).
    strict_conversation = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class VersionState(models.TextChoices):
    UNRELEASED = "unreleased"
    LIVE = "live"
    DRAINING = "draining"
    DRAINED = "drained"
    REVOKED = "revoked"


class BundleVersion(models.Model):
    """One published content document. `canonical` and `content_hash` never change after insert:
    a PostgreSQL trigger (migration 0002) refuses any UPDATE of them and any DELETE.

    `state` is the lifecycle; it is only written under a row lock on this version
    (see registry.lifecycle for the protocol)."""

    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    canonical = models.BinaryField()
    content_hash = models.CharField(max_length=64)
    message = models.TextField()
    author = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=16, choices=VersionState.choices, default=VersionState.UNRELEASED)
    draining_since = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True, default="")

    class Meta:
        # Columns, not the related model: an ordering through `bundle` would join registry_bundle,
        # and select_for_update() would then lock the bundle row too (a deadlock, found by
        # tests/test_races.py).
        ordering = ["bundle_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["bundle", "number"], name="version_number_unique"),
            models.UniqueConstraint(fields=["bundle", "content_hash"], name="version_content_unique"),
        ]
        indexes = [
            models.Index(fields=["state"], name="version_state_idx"),
            # "Drained or revoked lately" (the drain dashboard, adminui.selectors.drain_versions):
            # without these the planner scans every version ever released (migration 0014).
            models.Index(fields=["drained_at"], condition=models.Q(state="drained"), name="version_drained_at_idx"),
            models.Index(fields=["revoked_at"], condition=models.Q(state="revoked"), name="version_revoked_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.bundle_id}@{self.number}"


class Compatibility(models.TextChoices):
    # Like a schema registry's compatibility mode: BACKWARD refuses moves to a version that is
    # `major` against the current target, unless the move says allow_breaking with a reason.
    NONE = "none"
    BACKWARD = "backward"


class LabelQuerySet(models.QuerySet["Label"]):
    def targeting(self, version_id: int) -> "LabelQuerySet":
        """Labels that target `version_id`, alone or as one target of a split (weight 0 too)."""
        return self.filter(models.Q(version_id=version_id) | models.Q(targets__contains=[{"version_id": version_id}]))


class Label(models.Model):
    """A movable pointer (production, staging, ...) to one version of its bundle.

    Moves are saved with save() so django-simple-history records each one, with the
    reason as the change reason; `previous_version` is the target before the current one."""

    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="labels")
    name = models.CharField(max_length=limits.LABEL_NAME_MAX)
    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="labels")
    previous_version = models.ForeignKey(
        BundleVersion, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    protected = models.BooleanField(default=False)
    compatibility = models.CharField(max_length=16, choices=Compatibility.choices, default=Compatibility.NONE)
    # What the compatibility policy made of the latest move (passed, overridden, not applied);
    # tracked by the history like every other field, so each move keeps its own note.
    move_note = models.TextField(blank=True, default="")
    # Set by ops (registry.services.label_policy_set): check names whose latest result for a
    # target's content hash must be `success` before the label may move to it, and how many
    # approvals a move needs. Database defaults: the previous release still inserts labels.
    required_checks = models.JSONField(default=list, blank=True, db_default=[])
    required_approvals = models.PositiveSmallIntegerField(default=0, db_default=0)
    # What the latest change of the label was ("move" or "policy"), so that its history tells a
    # policy change (same target, new rules) from a move.
    change_kind = models.CharField(max_length=16, default="move", db_default="move")
    # A percentage rollout: [{"version_id", "number", "weight"}, ...] ordered by number, weights
    # summing to 100 (a weight may be 0: still a target, so it does not drain). Empty for the
    # usual single target, which is `version` (always the largest weight, ties to the newest).
    targets = models.JSONField(default=list, blank=True)
    # Bumped by every change of the label (move, weights, policy): its ETag, for If-Match.
    revision = models.PositiveIntegerField(default=1)
    # The atomic release that made the latest change, if one did (tracked by the history too).
    release = models.UUIDField(null=True, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)
    history = HistoricalRecords()

    # Added by django-simple-history, which has no type information: the reason recorded with
    # the next save, and a save that records no history row.
    _change_reason: str
    save_without_historical_record: Callable[..., None]

    objects = LabelQuerySet.as_manager()

    class Meta:
        ordering = ["bundle_id", "name"]  # no join: see BundleVersion.Meta
        constraints = [models.UniqueConstraint(fields=["bundle", "name"], name="label_name_unique")]

    def __str__(self) -> str:
        return f"{self.bundle_id}:{self.name}"


class CheckStatus(models.TextChoices):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"


class VersionCheck(models.Model):
    """One report of a check (an evaluation, a test run) on a bundle's content. Bound to the
    content hash, not the version number: the result is about those bytes. Append-only; the
    latest report per name is the check's state."""

    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="+")
    content_hash = models.CharField(max_length=64)
    name = models.CharField(max_length=limits.CHECK_NAME_MAX)
    status = models.CharField(max_length=16, choices=CheckStatus.choices)
    summary = models.TextField(blank=True, default="")
    details_url = models.CharField(max_length=limits.CHECK_DETAILS_URL_MAX, blank=True, default="")
    reported_by = models.CharField(max_length=200)
    reported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["bundle", "content_hash", "name", "-id"], name="check_latest_idx")]

    def __str__(self) -> str:
        return f"{self.name}={self.status} ({self.content_hash[:12]})"


class VersionApproval(models.Model):
    """One person's approval of a bundle's content (four eyes): bound to the content hash, like a
    check, so it never carries over to other bytes. At most one per approver and content hash;
    never by the version's author (registry.services.approval_record)."""

    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="+")
    content_hash = models.CharField(max_length=64)
    approver = models.CharField(max_length=200)
    reason = models.TextField()
    approved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["bundle", "content_hash", "approver"], name="approval_once_per_approver")
        ]

    def __str__(self) -> str:
        return f"{self.approver} approved {self.content_hash[:12]}"


class Release(models.Model):
    """Label changes across bundles applied together, all or none (registry.releases).
    `items` keeps each label's state before and after, so the release can be rolled back as
    a whole while those labels still stand where it left them."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    reason = models.TextField()
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    allow_breaking = models.BooleanField(default=False)
    items = models.JSONField()
    rollback_of = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="rolled_back_by"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"release {self.pk}"


class Include(models.Model):
    """One include of a published version (one entry of its `includes`, registry.includes): the
    edge from the including version to the snippet bundle, written by version_publish in the
    transaction that inserts the version. The version's bytes stay the record; these rows are
    their index, so "who includes tone" (registry.selectors.bundles_including, on every publish
    and label move answer) is an index probe instead of a read of every bundle's latest bytes.

    `current` is true while `version` is its bundle's latest: the next publish of that bundle
    clears it (under the bundle's row lock), so the partial indexes hold the edges of latest
    versions only and a bundle's history never lengthens the read."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="include_edges", db_index=False)
    # The including bundle (version.bundle, repeated): the publish that supersedes `version`
    # finds its current edges by it.
    bundle = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="+", db_index=False)
    position = models.PositiveSmallIntegerField()  # its index in `includes`: markers in order of first appearance
    marker = models.TextField()  # as written: `{{> tone@production}}`
    snippet = models.ForeignKey(Bundle, on_delete=models.PROTECT, related_name="+", db_index=False)
    # What the marker names: a label of the snippet bundle, or a version number (exactly one;
    # `label` is "" for a number, and no label has that name).
    label = models.CharField(max_length=limits.LABEL_NAME_MAX, blank=True, default="")
    number = models.PositiveIntegerField(null=True, blank=True)
    # The snippet version it resolved to, as the entry records it: the number in the registry
    # that resolved it (an import keeps it) and the content hash, which identifies it here.
    pinned_version = models.PositiveIntegerField()
    pinned_hash = models.CharField(max_length=64)
    current = models.BooleanField(default=True)

    class Meta:
        ordering = ["version_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "position"], name="include_position_unique"),
            models.CheckConstraint(
                condition=(~models.Q(label="") & models.Q(number__isnull=True))
                | models.Q(label="", number__isnull=False),
                name="include_label_or_number",
            ),
        ]
        indexes = [
            # Who includes a snippet (by a label): the publish and label move answers.
            models.Index(fields=["snippet", "label"], condition=models.Q(current=True), name="include_current_idx"),
            # The edges a publish of the including bundle supersedes.
            models.Index(fields=["bundle"], condition=models.Q(current=True), name="include_current_bundle_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.version_id} {self.marker}"


class ChangeState(models.TextChoices):
    PENDING = "pending"
    APPLIED = "applied"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"


class Change(models.Model):
    """A move (or split) or a release that a label's `required_approvals` turned into a request
    (registry.changes): the request as data, bound to the revision of each label it touches
    when it was made, applied as the requester's own request once `required` people other than
    the requester approved it (ChangeApproval), unless a label moved meanwhile (failed, stale)
    or it expired first. `bundles` (every bundle it touches) scopes who may see it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16)  # "move" or "release"
    state = models.CharField(max_length=16, choices=ChangeState.choices, default=ChangeState.PENDING)
    # move: {bundle, label, targets: [{version, weight}], allow_breaking, compatibility};
    # release: {moves: [{bundle, label, targets}], allow_breaking}. Version numbers, not ids.
    request = models.JSONField()
    # [{bundle, label, revision}]: each label's revision when the change was requested.
    revisions = models.JSONField()
    bundles = ArrayField(models.CharField(max_length=limits.BUNDLE_NAME_MAX))
    required = models.PositiveSmallIntegerField()
    # The role an approver needs: ops when a label it touches is protected, else publisher.
    approver_role = models.CharField(max_length=16)
    requester = models.CharField(max_length=200)
    # What the requester's key could do when it asked: the change applies as its request.
    requester_role = models.CharField(max_length=16)
    requester_scopes = models.JSONField(default=list)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_by = models.CharField(max_length=200, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    # Why it failed (the apply-time error), or the release it applied as.
    outcome = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "expires_at"], name="change_state_expiry")]

    def __str__(self) -> str:
        return f"change {self.pk} ({self.kind}, {self.state})"


class ChangeApproval(models.Model):
    """One person's approval of a Change; at most one per approver, never by its requester."""

    change = models.ForeignKey(Change, on_delete=models.CASCADE, related_name="approvals")
    approver = models.CharField(max_length=200)
    reason = models.TextField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["change", "approver"], name="change_approval_once")]

    def __str__(self) -> str:
        return f"{self.approver} approved {self.change_id}"
