"""What the move pages offer and show. The rules (who may move which label, what a new label
is created with, what a label's compatibility policy allows, what a move would do) live in
registry.lifecycle; this module only picks from them for display."""

from typing import Any

from access.actors import Actor
from adminui import selectors
from registry.contracts import Diff, by_severity, diff_contents
from registry.lifecycle import may_move, new_label_policy
from registry.models import Bundle, Label


def classify(old: dict[str, Any], new: dict[str, Any]) -> Diff:
    """registry.contracts' classification of a change, most severe first."""
    return by_severity(diff_contents(old, new))


def movable_labels(actor: Actor, bundle: Bundle) -> list[Label]:
    """The labels of `bundle` that `actor` may move (registry.lifecycle.may_move)."""
    return [label for label in selectors.bundle_labels(bundle) if may_move(actor, protected=label.protected)]


# The names most bundles use, offered on the move page until the bundle has them.
USUAL_LABELS = ("production", "staging")


def suggested_labels(actor: Actor, bundle: Bundle) -> list[tuple[str, str]]:
    """(name, text) of the usual labels `bundle` lacks that `actor` may create, with the policy
    they would be created with (registry.lifecycle.new_label_policy)."""
    existing = {label.name for label in selectors.bundle_labels(bundle)}
    out = []
    for name in USUAL_LABELS:
        policy = new_label_policy(name)
        if name not in existing and may_move(actor, protected=policy.protected):
            out.append((name, f"{name} (new label; compatibility: {policy.compatibility})"))
    return out
