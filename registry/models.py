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
    # Who may pin any version by number, even one that has not passed the bundle's labels'
    # required checks and approvals (registry.lifecycle.pin_policy): "role:ROLE" or "key:NAME"
    # grants, set by ops only (bundle_pin_policy_set, audited). Empty: nobody.
    pin_any_version = models.JSONField(default=list, blank=True, db_default=[])
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
        # tests/sessions_app/test_races.py).
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
    # What backs a check the registry itself reports (an evaluation run: its id and in-toto
    # attestation, or that it went stale); null for a check reported by CI.
    evidence = models.JSONField(null=True, blank=True)

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


class ToolState(models.TextChoices):
    # No version carrying the signature has left `unreleased` (nothing could call it yet).
    UNRELEASED = "unreleased"
    LIVE = "live"  # a label targets a version that carries it
    DRAINING = "draining"  # no label does, but a version carrying it still drains (sessions pinned)
    DRAINED = "drained"  # no label targets it and no live session can call it


class ToolSignature(models.Model):
    """A tool as sessions call it: its name and the hash of its canonical schema (the input schema,
    and the output schema where the tool gives one; registry.tool_signatures). One row per
    (name, hash), whichever bundles carry it; VersionTool says which versions do.

    `state` follows the states of the versions carrying it (registry.lifecycle.tools): it is
    written only under this row's lock, after the version transitions commit, so each
    transition (and its `tool.draining` / `tool.drained` event) happens exactly once however
    many versions share the signature and however many processes settle it at once."""

    name = models.CharField(max_length=64)
    schema_hash = models.CharField(max_length=64)
    # {"input_schema": ..., "output_schema": ...?}: what the hash is of, kept for the side-by-side view.
    schema = models.JSONField()
    state = models.CharField(max_length=16, choices=ToolState.choices, default=ToolState.UNRELEASED)
    # First and last seen are read from the versions carrying it (registry.selectors), not kept
    # here: a publish then never writes a row that other bundles' publishes share.
    state_changed_at = models.DateTimeField(null=True, blank=True)
    draining_since = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["name", "schema_hash"], name="tool_signature_unique")]
        indexes = [
            # The sweep settles every signature that is not drained (registry.lifecycle.tools).
            models.Index(fields=["state"], condition=~models.Q(state="drained"), name="tool_signature_open_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name}#{self.schema_hash[:12]}"


class VersionTool(models.Model):
    """One tool of a published version, as its signature: written by version_publish in the
    transaction that inserts the version (and by migration 0015's backfill for older ones), so
    "which versions carry this signature" is an index probe, never a scan of content."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="tool_edges", db_index=False)
    signature = models.ForeignKey(ToolSignature, on_delete=models.PROTECT, related_name="edges")
    position = models.PositiveSmallIntegerField()  # its index in the version's `tools`
    # The MCP server (its name in the version's `mcp_servers`) the tool was pinned from; "" for a
    # tool written in the content. The drift check walks the live versions' sourced tools by it.
    source = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        ordering = ["version_id", "position"]
        indexes = [models.Index(fields=["version"], condition=~models.Q(source=""), name="version_tool_sourced_idx")]
        constraints = [models.UniqueConstraint(fields=["version", "signature"], name="version_tool_unique")]

    def __str__(self) -> str:
        return f"{self.version_id} {self.signature_id}"


class McpDrift(models.Model):
    """A tool a live or draining version pinned from an MCP server that the server no longer
    offers as pinned (registry.mcp_drift): removed, or with another schema. One row per
    (version, tool, what the server offers now), so each drift is announced (`tool.drift`) once;
    `resolved_at` is set when a later check finds the server matching the pin again."""

    version = models.ForeignKey(BundleVersion, on_delete=models.PROTECT, related_name="+")
    server = models.CharField(max_length=64)
    url = models.CharField(max_length=2000)
    tool = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)  # "removed" or "changed"
    pinned_hash = models.CharField(max_length=64)
    live_hash = models.CharField(max_length=64, blank=True, default="")  # "" when removed
    sessions_active = models.PositiveIntegerField(default=0)
    detected_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-detected_at"]
        constraints = [
            models.UniqueConstraint(fields=["version", "tool", "live_hash"], name="mcp_drift_once"),
        ]
        indexes = [
            models.Index(fields=["version"], condition=models.Q(resolved_at__isnull=True), name="mcp_drift_open_idx")
        ]

    def __str__(self) -> str:
        return f"{self.version_id} {self.tool} {self.kind}"
