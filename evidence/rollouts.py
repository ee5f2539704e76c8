"""Guarded rollouts: a split label whose newer arm is judged against the older one on a
schedule, and held, rolled back or promoted a step by a label move with the evidence as its
reason (docs/operations.md#guarded-rollouts).

Every action is `registry.services.label_move` by the actor `rollout-guard` (ops): the same
locks, policies (a protected label, required checks and approvals may refuse it: the guard then
turns `blocked` and says why), history and audit as a person's move, and a `rollout.guarded`
webhook with the evidence. Lock order: the guard row (FOR UPDATE, SKIP LOCKED: two workers never
judge one guard at once), then what label_move locks (registry.lifecycle.locks).

The judgement is sequential (evidence.stats.sequence_radius): the worker looks every
ROLLOUT_GUARD_INTERVAL seconds for the rollout's whole life, and the confidence sequence keeps
the chance of halting an arm that is not worse at about 5 % over all those looks together
(bench/guard_sim.py measures it). A metric halts the rollout when its whole interval lies beyond
the regression it tolerates: the candidate is worse by more than `tolerance`, at that
confidence."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_role
from audit.services import audit_record
from core import events
from core.errors import Conflict, DomainError, InvalidContent
from evidence import counts, selectors, stats
from evidence.models import GuardState, RolloutGuard
from registry import selectors as registry_selectors
from registry.models import Bundle, BundleVersion, Label
from registry.services import label_move

T = TypeVar("T")
GUARD_ACTOR = Actor(name="rollout-guard", role=Role.OPS)
ACTIONS = ("hold", "rollback")
SHARE_METRICS = ("outcome.", "tool_error_rate")
MAX_METRICS = 10
# django-simple-history's change reason column (registry migration 0001: varchar(100)).
HISTORY_REASON_MAX = 100


def _bad(field: str, message: str) -> InvalidContent:
    return InvalidContent(f"guard.{field}: {message}", {f"guard.{field}": [message]})


def _metric(i: int, m: Any) -> dict[str, Any]:
    """One metric of a guard, checked."""
    if not isinstance(m, dict) or set(m) - {"name", "tolerance", "relative", "better"}:
        raise _bad(f"metrics[{i}]", "An object with name, tolerance, relative?, better?.")
    name = m.get("name")
    known = name in selectors.LOWER_IS_BETTER or name == "outcome.resolved"
    if not isinstance(name, str) or not (known or (name.startswith("score.") and len(name) <= 106)):
        raise _bad(f"metrics[{i}].name", "outcome.<status>, cost_per_turn, tool_error_rate or score.<name>.")
    tolerance = m.get("tolerance", 0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance <= 1e6:
        raise _bad(f"metrics[{i}].tolerance", "A number, 0 or more (points as a share: 0.02 is 2 points).")
    relative = m.get("relative", False)
    if not isinstance(relative, bool):
        raise _bad(f"metrics[{i}].relative", "true or false.")
    better = m.get("better", "lower" if name in selectors.LOWER_IS_BETTER else "higher")
    if better not in ("higher", "lower"):
        raise _bad(f"metrics[{i}].better", "higher or lower.")
    return {"name": name, "tolerance": float(tolerance), "relative": relative, "better": better}


def _steps(steps: Any) -> list[int] | None:
    if steps is None:
        return None
    ok = isinstance(steps, list) and 1 <= len(steps) <= 10
    ok = ok and all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 100 for s in steps)
    if not ok or steps != sorted(set(steps)) or steps[-1] != 100:
        raise _bad("promote_steps", "Increasing weights from 1 to 100, ending at 100 (e.g. [1, 5, 25, 100]).")
    return list(steps)


def guard_spec(value: Any) -> dict[str, Any]:
    """A guard as PUT .../guard/ takes it, checked (400 naming the field):
    {"metrics": [{"name", "tolerance", "relative"?, "better"?}], "min_sessions", "action",
    "promote_steps"?}."""
    if not isinstance(value, dict):
        raise _bad("body", "Expected a JSON object.")
    unknown = sorted(set(value) - {"metrics", "min_sessions", "action", "promote_steps"})
    if unknown:
        raise InvalidContent("Unknown fields in guard.", {f"guard.{n}": ["Unknown field."] for n in unknown})
    metrics = value.get("metrics")
    if not isinstance(metrics, list) or not 1 <= len(metrics) <= MAX_METRICS:
        raise _bad("metrics", f"1 to {MAX_METRICS} metrics.")
    checked = [_metric(i, m) for i, m in enumerate(metrics)]
    minimum = value.get("min_sessions", 100)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or not 2 <= minimum <= 10_000_000:
        raise _bad("min_sessions", "A whole number from 2.")
    action = value.get("action", "rollback")
    if action not in ACTIONS:
        raise _bad("action", "hold or rollback.")
    steps = _steps(value.get("promote_steps"))
    spec: dict[str, Any] = {"metrics": checked, "min_sessions": minimum, "action": action}
    if steps is not None:
        spec["promote_steps"] = steps
    return spec


def _arms_of(label: Label) -> tuple[int, int] | None:
    """(baseline id, candidate id) of a two-version split: the older and the newer."""
    if len(label.targets) != 2:
        return None
    ordered = sorted(label.targets, key=lambda t: t["number"])
    return ordered[0]["version_id"], ordered[1]["version_id"]


def _weights(baseline: BundleVersion, candidate: BundleVersion, weight: int) -> list[tuple[BundleVersion, int]]:
    return [(baseline, 100 - weight), (candidate, weight)]


def guard_out(guard: RolloutGuard) -> dict[str, Any]:
    return {
        "label": guard.label.name,
        "baseline": guard.baseline.number,
        "candidate": guard.candidate.number,
        "guard": guard.spec,
        "state": guard.state,
        "step": guard.step,
        "since": guard.since,
        "last_judged_at": guard.last_judged_at,
        "last_verdict": guard.last_verdict,
        "updated_at": guard.updated_at,
        "updated_by": guard.updated_by,
    }


@transaction.atomic
def guard_set(*, bundle: Bundle, label_name: str, spec: Any, actor: Actor, reason: str) -> RolloutGuard:
    """Put a guard on a split label (ops), replacing its guard if it had one; with promote
    steps, the label moves to the first step's weights."""
    require_role(actor, Role.OPS, "Guarding a rollout")
    checked = guard_spec(spec)
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1000:
        raise InvalidContent("Give a reason.", {"reason": ["A reason, at most 1,000 characters."]})
    label = registry_selectors.label_get(bundle=bundle, name=label_name)
    arms = _arms_of(label)
    if arms is None:
        raise Conflict(
            f"Label {label_name!r} is not split over two versions; split it first (targets).",
            {"targets": label.targets},
        )
    baseline = BundleVersion.objects.get(pk=arms[0])
    candidate = BundleVersion.objects.get(pk=arms[1])
    now = timezone.now()
    RolloutGuard.objects.filter(label=label).delete()
    guard = RolloutGuard.objects.create(
        label=label,
        baseline=baseline,
        candidate=candidate,
        spec=checked,
        since=counts.today(),
        step_base={},
        updated_at=now,
        updated_by=actor.name,
    )
    audit_record(
        actor=actor,
        action="rollout.guard_set",
        target_type="label",
        target=f"{bundle.name}/{label.name}",
        reason=reason,
        data={"guard": checked, "baseline": baseline.number, "candidate": candidate.number},
    )
    steps = checked.get("promote_steps")
    if steps:
        weight = next(t["weight"] for t in label.targets if t["version_id"] == candidate.pk)
        if weight != steps[0]:
            label_move(
                bundle=bundle,
                name=label.name,
                targets=_weights(baseline, candidate, steps[0]),
                actor=GUARD_ACTOR,
                reason=f"guard: start the stepped rollout at {steps[0]} % ({reason})"[:HISTORY_REASON_MAX],
            )
    guard.step_base = _outcome_ns(guard)
    guard.save(update_fields=["step_base"])
    return guard


def guard_of(*, label: Label) -> RolloutGuard | None:
    return RolloutGuard.objects.select_related("label__bundle", "baseline", "candidate").filter(label=label).first()


@transaction.atomic
def guard_remove(*, guard: RolloutGuard, actor: Actor, reason: str) -> None:
    """Take the guard off its label (ops); the label keeps its targets."""
    require_role(actor, Role.OPS, "Removing a rollout guard")
    audit_record(
        actor=actor,
        action="rollout.guard_removed",
        target_type="label",
        target=f"{guard.label.bundle.name}/{guard.label.name}",
        reason=reason or "",
        data={"state": guard.state},
    )
    guard.delete()


def label_change_guarded(
    *, bundle: Bundle, label_name: str, guard: Any, actor: Actor, reason: str, change: Callable[[], T]
) -> T:
    """A label change (`change`: the move of PUT .../labels/{label}/, or the policy change of
    PATCH) with its guard, in one transaction: the role and the guard are checked first, so a
    refused guard moves nothing; `guard` None removes the label's guard. A move that became a
    change request (required approvals) cannot carry a guard: 409, and nothing is requested."""
    require_role(actor, Role.OPS, "Guarding a rollout")
    if guard is not None:
        guard_spec(guard)
    with transaction.atomic():
        result = change()
        if getattr(result, "change", None) is not None:
            raise Conflict(
                "This move needs approvals: it would become a change request, which cannot carry a guard. "
                "Guard the label once the move is applied.",
                {"guard": ["Set it after the change is approved."]},
            )
        if guard is None:
            found = RolloutGuard.objects.filter(label__bundle=bundle, label__name=label_name).first()
            if found is not None:
                guard_remove(guard=found, actor=actor, reason=reason)
        else:
            guard_set(bundle=bundle, label_name=label_name, spec=guard, actor=actor, reason=reason)
    return result


OVERRIDES = ("pause", "resume", "acknowledge")


@transaction.atomic
def guard_override(*, guard: RolloutGuard, action: str, actor: Actor, reason: str) -> RolloutGuard:
    """Ops overrides a guard: `pause` (not judged until resumed), `resume`, or `acknowledge` a
    hold, rollback or block and continue watching on fresh evidence (from today)."""
    require_role(actor, Role.OPS, "Overriding a rollout guard")
    if action not in OVERRIDES:
        raise InvalidContent("Unknown action.", {"action": [f"One of {', '.join(OVERRIDES)}."]})
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1000:
        raise InvalidContent("Give a reason.", {"reason": ["A reason, at most 1,000 characters."]})
    guard = RolloutGuard.objects.select_for_update().select_related("label__bundle").get(pk=guard.pk)
    if action == "pause":
        guard.state = GuardState.PAUSED
    elif action == "resume":
        if guard.state != GuardState.PAUSED:
            raise Conflict(f"The guard is {guard.state}, not paused.", {"state": guard.state})
        guard.state = GuardState.WATCHING
    else:
        if guard.state not in (GuardState.HELD, GuardState.ROLLED_BACK, GuardState.BLOCKED):
            raise Conflict(f"The guard is {guard.state}: nothing to acknowledge.", {"state": guard.state})
        guard.state, guard.since = GuardState.WATCHING, counts.today()
        guard.step_base = _outcome_ns(guard)
    guard.updated_at, guard.updated_by = timezone.now(), actor.name
    guard.save(update_fields=["state", "since", "step_base", "updated_at", "updated_by"])
    audit_record(
        actor=actor,
        action=f"rollout.guard_{action}",
        target_type="label",
        target=f"{guard.label.bundle.name}/{guard.label.name}",
        reason=reason,
        data={"state": guard.state},
    )
    return guard


# --- the judgement ------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricJudgement:
    name: str
    n_a: int
    n_b: int
    worse_by: float | None  # candidate worse than baseline by this much (negative: better)
    low: float | None
    high: float | None
    tolerance: float | None
    verdict: str  # "worse", "not worse", "not enough data"

    def out(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 6)

        return {
            "metric": self.name,
            "n": [self.n_a, self.n_b],
            "worse_by": r(self.worse_by),
            "interval": [r(self.low), r(self.high)],
            "tolerance": r(self.tolerance),
            "verdict": self.verdict,
        }

    def reason(self) -> str:
        """The label move's reason: `guard: <metric> worse by X (interval low..high), n=a/b`,
        shares in points. At most HISTORY_REASON_MAX characters (the label history's column);
        the tolerance and every metric are in the audit record and the webhook."""
        share = self.name.startswith(SHARE_METRICS)

        def show(x: float | None) -> str:
            if x is None or not math.isfinite(x):
                return "?"
            return f"{x * 100:.1f}" if share else f"{x:.3g}"

        unit = " points" if share else ""
        text = (
            f"guard: {self.name} worse by {show(self.worse_by)}{unit} "
            f"(interval {show(self.low)}..{show(self.high)}), n={self.n_a}/{self.n_b}"
        )
        return text[:HISTORY_REASON_MAX]


def judge_metric(metric: dict[str, Any], a: stats.Estimate, b: stats.Estimate, minimum: int) -> MetricJudgement:
    """One metric of the guard, with the confidence sequence's interval (evidence.stats)."""
    name = metric["name"]
    if a.n < minimum or b.n < minimum or a.value is None or b.value is None or a.se is None or b.se is None:
        return MetricJudgement(name, a.n, b.n, None, None, None, None, stats.NOT_ENOUGH)
    d = b.value - a.value
    worse_by = -d if metric["better"] == "higher" else d
    se = math.sqrt(a.se**2 + b.se**2)
    radius = stats.sequence_radius(se, min(a.n, b.n))
    tolerance = metric["tolerance"] * abs(a.value) if metric["relative"] else metric["tolerance"]
    low, high = worse_by - radius, worse_by + radius
    return MetricJudgement(name, a.n, b.n, worse_by, low, high, tolerance, "worse" if low > tolerance else "not worse")


def judge(spec: dict[str, Any], a: selectors.Totals, b: selectors.Totals) -> list[MetricJudgement]:
    ea, eb = selectors.metric_estimates(a), selectors.metric_estimates(b)
    empty = stats.Estimate(n=0, value=None, low=None, high=None)
    return [
        judge_metric(m, ea.get(m["name"], empty), eb.get(m["name"], empty), spec["min_sessions"])
        for m in spec["metrics"]
    ]


def _totals(guard: RolloutGuard) -> tuple[selectors.Totals, selectors.Totals]:
    label = guard.label.name
    return (
        selectors.arm_totals(selectors.Arm(guard.baseline, label), since=guard.since),
        selectors.arm_totals(selectors.Arm(guard.candidate, label), since=guard.since),
    )


def _outcome_ns(guard: RolloutGuard) -> dict[str, int]:
    a, b = _totals(guard)
    return {"baseline": a.n("outcomes"), "candidate": b.n("outcomes")}


def _act(guard: RolloutGuard, *, action: str, reason: str, targets: Any, verdict: dict[str, Any]) -> None:
    """The label change (if any) and its record: audit, webhook, the guard's state."""
    label = guard.label
    bundle = label.bundle
    try:
        with transaction.atomic():
            if targets is not None:
                if isinstance(targets, BundleVersion):
                    label_move(bundle=bundle, name=label.name, version=targets, actor=GUARD_ACTOR, reason=reason)
                else:
                    label_move(bundle=bundle, name=label.name, targets=targets, actor=GUARD_ACTOR, reason=reason)
    except DomainError as exc:  # a policy refused the guard's move: a person decides
        action, reason = "blocked", f"guard: {action} refused ({exc.message}); {reason}"
        guard.state = GuardState.BLOCKED
    verdict = {**verdict, "action": action, "reason": reason}
    guard.last_verdict = verdict
    audit_record(
        actor=GUARD_ACTOR,
        action="rollout.guarded",
        target_type="label",
        target=f"{bundle.name}/{label.name}",
        reason=reason,
        data=verdict,
    )
    events.emit(
        "rollout.guarded",
        bundle=bundle.name,
        label=label.name,
        action=action,
        reason=reason,
        baseline=guard.baseline.number,
        candidate=guard.candidate.number,
        evidence=verdict["metrics"],
    )


@transaction.atomic
def guard_judge(*, guard_id: int) -> dict[str, Any] | None:
    """Judge one watching guard (None: busy with another worker, or not watching) and act."""
    guard = (
        RolloutGuard.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("label__bundle", "baseline", "candidate")
        .filter(pk=guard_id, state=GuardState.WATCHING)
        .first()
    )
    if guard is None:
        return None
    now = timezone.now()
    guard.last_judged_at = now
    label = Label.objects.get(pk=guard.label_id)
    guard.label = label
    fields = ["last_judged_at", "last_verdict", "state", "step", "step_base"]
    if _arms_of(label) != (guard.baseline_id, guard.candidate_id):
        guard.state = GuardState.ENDED  # a person moved the label: the guarded split is gone
        guard.last_verdict = {"action": "ended", "reason": "the label no longer holds the guarded split"}
        guard.save(update_fields=fields)
        return dict(guard.last_verdict)
    a, b = _totals(guard)
    judged = judge(guard.spec, a, b)
    verdict: dict[str, Any] = {"at": now.isoformat(), "metrics": [j.out() for j in judged]}
    worse = [j for j in judged if j.verdict == "worse"]
    steps = guard.spec.get("promote_steps") or []
    if worse:
        first = worse[0]
        if guard.spec["action"] == "rollback":
            guard.state = GuardState.ROLLED_BACK
            targets: Any = _weights(guard.baseline, guard.candidate, 0)
            _act(guard, action="rollback", reason=first.reason(), targets=targets, verdict=verdict)
        else:
            guard.state = GuardState.HELD
            _act(guard, action="hold", reason=first.reason(), targets=None, verdict=verdict)
    elif steps and guard.step + 1 < len(steps):
        base = guard.step_base or {}
        minimum = guard.spec["min_sessions"]
        grown = (
            a.n("outcomes") - base.get("baseline", 0) >= minimum
            and b.n("outcomes") - base.get("candidate", 0) >= minimum
        )
        if grown:
            guard.step += 1
            weight = steps[guard.step]
            reason = (
                f"guard: promote to {weight} %: no metric worse than it tolerates, "
                f"n={a.n('outcomes')}/{b.n('outcomes')}"
            )
            target: Any = guard.candidate if weight == 100 else _weights(guard.baseline, guard.candidate, weight)
            if weight == 100:
                guard.state = GuardState.PROMOTED
            guard.step_base = {"baseline": a.n("outcomes"), "candidate": b.n("outcomes")}
            _act(guard, action="promote", reason=reason, targets=target, verdict=verdict)
        else:
            guard.last_verdict = {**verdict, "action": "none"}
    else:
        guard.last_verdict = {**verdict, "action": "none"}
    guard.save(update_fields=fields)
    return dict(guard.last_verdict)


def guards_judge() -> int:
    """Judge every watching guard, each in its own transaction; returns how many acted or were
    judged. Usage counted in this process is flushed first (the worker counts none itself)."""
    counts.flush()
    ids = list(RolloutGuard.objects.filter(state=GuardState.WATCHING).values_list("pk", flat=True))
    return sum(1 for guard_id in ids if guard_judge(guard_id=guard_id) is not None)
