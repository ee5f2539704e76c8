"""A label PUT or PATCH that carries a rollout guard (docs/operations.md#guarded-rollouts)."""

from collections.abc import Callable
from typing import Any, TypeVar

from access.actors import Actor
from evidence import rollouts
from registry.models import Bundle

T = TypeVar("T")


def guarded(
    data: dict[str, Any], change: Callable[[], T], *, bundle: Bundle, label: str, actor: Actor, reason: str
) -> T:
    """`change()`, or with `data["guard"]` (taken out of `data`) the change and the guard in one
    transaction (evidence.rollouts.label_change_guarded: ops, the guard checked first)."""
    if "guard" not in data:
        return change()
    guard = data.pop("guard")
    return rollouts.label_change_guarded(
        bundle=bundle, label_name=label, guard=guard, actor=actor, reason=reason, change=change
    )
