"""Reads of the evidence: a version's (or an arm's) figures and the comparison of two, summed
from the rollups (evidence.models.EvidenceDay, ScoreDay), so a read costs one short aggregate
per table whatever the number of sessions behind it. Usage counted in memory reaches the
rollups within evidence.counts.FLUSH_SECONDS. The method: evidence.stats and docs/api.md#evidence."""

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.db.models import Sum

from evidence import counts, stats
from evidence.models import EvidenceDay, Outcome, ScoreDay
from registry.models import BundleVersion

OUTCOMES = tuple(Outcome.values)
# Which way is better, per compared metric (a score: higher; name your scores so).
LOWER_IS_BETTER = {"outcome.escalated", "outcome.abandoned", "outcome.failed", "cost_per_turn", "tool_error_rate"}


@dataclass(frozen=True)
class Arm:
    """What the evidence is about: one version, through one label (None: every label)."""

    version: BundleVersion
    label: str | None = None


@dataclass
class Totals:
    sums: dict[str, float] = field(default_factory=dict)
    latency: list[int] = field(default_factory=list)
    scores: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    def get(self, name: str) -> float:
        return float(self.sums.get(name) or 0)

    def n(self, name: str) -> int:
        return int(self.sums.get(name) or 0)


def _window(query: Any, arm: Arm, since: date | None, until: date | None) -> Any:
    query = query.filter(version=arm.version)
    if arm.label is not None:
        query = query.filter(label=arm.label)
    if since is not None:
        query = query.filter(day__gte=since)
    if until is not None:
        query = query.filter(day__lte=until)
    return query


def arm_totals(arm: Arm, *, since: date | None = None, until: date | None = None) -> Totals:
    """The arm's rollups summed over the days of [since, until] (either end open)."""
    days = _window(EvidenceDay.objects.all(), arm, since, until)
    sums = days.aggregate(**{c: Sum(c) for c in counts.COLUMNS})
    latency = [0] * counts.LATENCY_BUCKETS
    for buckets in days.exclude(latency_buckets=[]).values_list("latency_buckets", flat=True):
        for i, c in enumerate(buckets[: counts.LATENCY_BUCKETS]):
            latency[i] += c
    scores = {
        row["name"]: (int(row["n"]), float(row["total"]), float(row["total_sq"]))
        for row in _window(ScoreDay.objects.all(), arm, since, until)
        .values("name")
        .annotate(n=Sum("n"), total=Sum("total"), total_sq=Sum("total_sq"))
        .order_by("name")
    }
    return Totals(sums={k: v or 0 for k, v in sums.items()}, latency=latency, scores=scores)


def _percentile(latency: list[int], q: float) -> float | None:
    n = sum(latency)
    if n == 0:
        return None
    rank, seen = q * n, 0
    for i, c in enumerate(latency):
        seen += c
        if seen >= rank:
            return round(counts.bucket_upper_ms(i), 1)
    return None


def _ratio(num: float, den: float, n: int, digits: int = 6) -> dict[str, Any]:
    return {"n": n, "value": round(num / den, digits) if den else None}


def cost_per_turn(t: Totals) -> stats.Estimate:
    total = t.get("input_cost") + t.get("output_cost")
    return stats.mean(t.n("priced_turns"), total, t.get("cost_sq"))


def metric_estimates(t: Totals) -> dict[str, stats.Estimate]:
    """The figures a comparison and the guard judge, each with its n and standard error."""
    out = {f"outcome.{s}": stats.share(t.n(s), t.n("outcomes")) for s in OUTCOMES}
    out["cost_per_turn"] = cost_per_turn(t)
    out["tool_error_rate"] = stats.share(t.n("tool_errors"), t.n("tool_results"))
    for name, (n, total, total_sq) in t.scores.items():
        out[f"score.{name}"] = stats.mean(n, total, total_sq)
    return out


def evidence_of(t: Totals) -> dict[str, Any]:
    """The evidence answer's figures from an arm's totals; every figure says its n."""
    usage_turns, priced = t.n("usage_turns"), t.n("priced_turns")
    sessions = t.n("turn_sessions")
    cost = t.get("input_cost") + t.get("output_cost")
    return {
        "sessions": {"with_turns": sessions, "ended_with_outcome": t.n("outcomes")},
        "outcomes": {s: stats.share(t.n(s), t.n("outcomes")).out() for s in OUTCOMES},
        "scores": {name: stats.mean(n, total, sq).out() for name, (n, total, sq) in t.scores.items()},
        "turns_per_session": _ratio(t.get("turns"), sessions, sessions, 3),
        "tokens_per_turn": {
            "input": _ratio(t.get("input_tokens"), usage_turns, usage_turns, 1),
            "output": _ratio(t.get("output_tokens"), usage_turns, usage_turns, 1),
        },
        "cache": {
            # measured: what the providers' usage says was read from (written to) their cache
            "read_share": _ratio(t.get("cache_read_tokens"), t.get("input_tokens"), usage_turns, 4),
            "write_share": _ratio(t.get("cache_write_tokens"), t.get("input_tokens"), usage_turns, 4),
        },
        "cost_usd": {
            "per_turn": cost_per_turn(t).out(),
            "input_per_turn": _ratio(t.get("input_cost"), priced, priced),
            "output_per_turn": _ratio(t.get("output_cost"), priced, priced),
            # the priced cost of the arm's turns over the sessions that made turn calls
            "per_session": _ratio(cost, sessions, sessions),
            "unpriced_turns": usage_turns - priced,
        },
        "tool_errors": stats.share(t.n("tool_errors"), t.n("tool_results")).out(),
        "latency_ms": {"n": sum(t.latency), "p50": _percentile(t.latency, 0.5), "p95": _percentile(t.latency, 0.95)},
    }


def version_evidence(arm: Arm, *, since: date | None = None, until: date | None = None) -> dict[str, Any]:
    """GET .../versions/{n}/evidence/."""
    version = arm.version
    return {
        "bundle": version.bundle.name,
        "version": version.number,
        "label": arm.label,
        "since": since,
        "until": until,
        **evidence_of(arm_totals(arm, since=since, until=until)),
    }


def compare_totals(a: Totals, b: Totals) -> dict[str, Any]:
    """Each metric's difference b - a with its 95 % interval and verdict (evidence.stats)."""
    ea, eb = metric_estimates(a), metric_estimates(b)
    out = {}
    for name in sorted(set(ea) | set(eb)):
        empty = stats.Estimate(n=0, value=None, low=None, high=None)
        diff = stats.difference(ea.get(name, empty), eb.get(name, empty), higher_is_better=name not in LOWER_IS_BETTER)
        out[name] = {**diff.out(), "better": "lower" if name in LOWER_IS_BETTER else "higher"}
    return out


def arms_compared(a: Arm, b: Arm, *, since: date | None = None, until: date | None = None) -> dict[str, Any]:
    """GET .../evidence/compare/."""

    def side(arm: Arm) -> dict[str, Any]:
        return {"version": arm.version.number, "label": arm.label}

    ta, tb = arm_totals(a, since=since, until=until), arm_totals(b, since=since, until=until)
    return {
        "bundle": a.version.bundle.name,
        "a": side(a),
        "b": side(b),
        "since": since,
        "until": until,
        "method": "docs/api.md#evidence: b - a, 95 % interval (Wilson / Wald / Welch), verdict at n >= "
        f"{stats.MIN_N} per arm",
        "metrics": compare_totals(ta, tb),
    }


def split_arms(*, targets: list[dict[str, Any]], versions: dict[int, BundleVersion], label: str) -> tuple[Arm, Arm]:
    """A split label's two arms, (older, newer) by version number."""
    ordered = sorted(targets, key=lambda t: t["number"])
    return Arm(versions[ordered[0]["version_id"]], label), Arm(versions[ordered[-1]["version_id"]], label)
