"""The admin pages for prompt engineers and ops, mounted by the ModelAdmins' get_urls()
(adminui/admin.py), one module per subject: bundles, versions, labels (moves and rollbacks,
with their confirmation step in moves), governance (a label's policy, approving a version),
sessions (and the drain dashboard), models (the retiring-models dashboard), evals (suites, runs
compared, runs on the worker), playground; base holds what every page shares.

The pages are an entry point like the API, and hold no rule of their own. Every read is an
adminui.selectors function (or a registry/metrics/skills selector); every write calls the
same service the REST API calls (bundle_create, version_publish, label_move, label_rollback,
label_policy_set, version_revoke, approval_record, session_end) with the Actor of the signed-in
person, so roles, reasons, protected labels, immutability and locking hold identically; every
"what would this do" page shows the registry.lifecycle preview the services' rules compute.
The pages only decide what to *offer*; a forged request reaches the service, which refuses it."""

from adminui.views.base import View, page
from adminui.views.bundles import bundle_add, bundle_edit, bundle_history, bundle_list, bundle_overview
from adminui.views.changes import change_decide, change_list
from adminui.views.evals import eval_compare, eval_start, suite_detail, suite_list, suite_new
from adminui.views.governance import label_policy, version_approve
from adminui.views.labels import label_list, label_move, label_rollback
from adminui.views.models import model_catalog, model_migrate, models_retiring
from adminui.views.playground import playground_page
from adminui.views.sessions import (
    drain_dashboard,
    drain_json,
    drain_tools,
    session_detail,
    session_end,
    session_list,
)
from adminui.views.versions import version_detail, version_diff, version_list, version_new, version_revoke

__all__ = [
    "change_decide",
    "model_catalog",
    "model_migrate",
    "models_retiring",
    "change_list",
    "View",
    "bundle_add",
    "bundle_edit",
    "bundle_history",
    "bundle_list",
    "bundle_overview",
    "drain_dashboard",
    "drain_json",
    "drain_tools",
    "eval_compare",
    "eval_start",
    "label_list",
    "label_move",
    "label_policy",
    "label_rollback",
    "page",
    "playground_page",
    "session_detail",
    "session_end",
    "session_list",
    "suite_detail",
    "suite_list",
    "suite_new",
    "version_detail",
    "version_approve",
    "version_diff",
    "version_list",
    "version_new",
    "version_revoke",
]
