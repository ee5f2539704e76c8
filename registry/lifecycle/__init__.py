"""The release lifecycle, in one package:

- `locks`: the row locks and their order (label row, then version rows in ascending id). Its
  docstring is the one description of the locking protocol and why it cannot deadlock.
- `versions`: the state transitions of a version (make live, release into draining, drain,
  revoke, pin at session start) and the rollout arithmetic that picks a pin.
- `labels`: the rules of a label move (who may move, what a new label is created with, what a
  label's compatibility policy and required checks allow, valid splits, If-Match), and
  `label_apply_targets`, the one function that applies a move, shared by registry.services
  and registry.releases, with `label_moved_emit`, the one `label.moved` payload.
- `tools`: the tool-signature index a publish writes, and each signature's state, settled after
  the version transitions commit (`tool.draining`, `tool.drained`).
- `previews`: read-only answers to "what would this do" for moves, publishes and revokes.

Services (registry.services, registry.releases, sessions_app.services) call these; nothing
here is an entry point of its own except the transitions that are whole services
(version_drain, version_revoke). Imports run one way: these modules read models and selectors
and never import a tasks module (a drain is enqueued by task name, see core.enqueue). Callers
use the names below (`from registry import lifecycle; lifecycle.label_lock(...)`)."""

from registry.lifecycle.common import content_of, publish_model_check, require_text
from registry.lifecycle.labels import (
    COMPATIBLE_ON_CREATE,
    PROTECTED_ON_CREATE,
    ApprovalsVerdict,
    ChecksVerdict,
    CompatibilityCheck,
    LabelPolicy,
    Targets,
    approvals_verdict,
    check_may_move,
    check_targetable,
    checks_verdict,
    compatibility_check,
    compatibility_note,
    label_apply_targets,
    label_etag,
    label_is_protected,
    label_moved_emit,
    label_state,
    label_target_ids,
    may_move,
    move_refusal,
    new_label_policy,
    primary_of,
    require_approvals,
    require_checks,
    retiring_notes,
    revision_check,
    same_targets,
    targets_out,
    targets_valid,
)
from registry.lifecycle.locks import label_lock, label_lock_shared, version_lock_shared, versions_lock
from registry.lifecycle.previews import (
    MoveConsequence,
    MovePreview,
    PublishCheck,
    RevokePreview,
    contract_check,
    label_move_preview,
    latest_content,
    version_publish_check,
    version_revoke_preview,
)
from registry.lifecycle.tools import (
    tool_edges_backfill,
    tool_edges_write,
    tool_signatures_settle,
    tool_signatures_settle_open,
    tools_settle_after_commit,
)
from registry.lifecycle.versions import (
    VERSION_DRAIN_TASK,
    enqueue_version_drain,
    routing_bucket,
    target_for_bucket,
    version_drain,
    version_drain_request,
    version_make_live,
    version_pin,
    version_release,
    version_revoke,
    versions_pin_on_label,
)

__all__ = [
    "ApprovalsVerdict",
    "COMPATIBLE_ON_CREATE",
    "ChecksVerdict",
    "CompatibilityCheck",
    "LabelPolicy",
    "MoveConsequence",
    "MovePreview",
    "PROTECTED_ON_CREATE",
    "PublishCheck",
    "RevokePreview",
    "Targets",
    "VERSION_DRAIN_TASK",
    "approvals_verdict",
    "check_may_move",
    "check_targetable",
    "checks_verdict",
    "compatibility_check",
    "compatibility_note",
    "content_of",
    "contract_check",
    "enqueue_version_drain",
    "label_apply_targets",
    "label_etag",
    "label_is_protected",
    "label_lock",
    "label_lock_shared",
    "label_move_preview",
    "label_moved_emit",
    "label_state",
    "label_target_ids",
    "latest_content",
    "may_move",
    "move_refusal",
    "new_label_policy",
    "primary_of",
    "publish_model_check",
    "require_approvals",
    "require_checks",
    "require_text",
    "retiring_notes",
    "revision_check",
    "routing_bucket",
    "same_targets",
    "target_for_bucket",
    "targets_out",
    "targets_valid",
    "tool_edges_backfill",
    "tool_edges_write",
    "tool_signatures_settle",
    "tool_signatures_settle_open",
    "tools_settle_after_commit",
    "version_drain",
    "version_drain_request",
    "version_lock_shared",
    "version_make_live",
    "version_pin",
    "version_publish_check",
    "version_release",
    "version_revoke",
    "version_revoke_preview",
    "versions_lock",
    "versions_pin_on_label",
]
