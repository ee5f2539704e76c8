"""The evidence panel of the admin's pages (the version page, the move confirmation, the drain
view): evidence.selectors' answer turned into rows of words, so the templates do no arithmetic."""

from typing import Any

from evidence import selectors as evidence_selectors
from registry.models import BundleVersion


def _share(figure: dict[str, Any]) -> str:
    if figure.get("value") is None:
        return f"no data (n = {figure.get('n', 0)})"
    text = f"{100 * figure['value']:.1f} %"
    if figure.get("interval"):
        low, high = figure["interval"]
        text += f" ({100 * low:.1f} to {100 * high:.1f})"
    return f"{text}, n = {figure['n']}"


def _number(figure: dict[str, Any], unit: str = "", digits: int = 2) -> str:
    if figure.get("value") is None:
        return f"no data (n = {figure.get('n', 0)})"
    text = f"{unit}{figure['value']:,.{digits}f}"
    if figure.get("interval") and figure["interval"][0] is not None:
        low, high = figure["interval"]
        text += f" ({unit}{low:,.{digits}f} to {unit}{high:,.{digits}f})"
    return f"{text}, n = {figure['n']}"


def evidence_rows(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """(heading, words) per figure, 95 % intervals in brackets, each with its n."""
    rows = [("Sessions", f"{evidence['sessions']['with_turns']} with turn calls, "
             f"{evidence['sessions']['ended_with_outcome']} ended with an outcome")]  # fmt: skip
    rows += [(f"Outcome: {status}", _share(figure)) for status, figure in evidence["outcomes"].items()]
    rows += [(f"Score: {name}", _number(figure)) for name, figure in evidence["scores"].items()]
    rows.append(("Turns per session", _number(evidence["turns_per_session"], digits=1)))
    tokens = evidence["tokens_per_turn"]
    rows.append(
        ("Tokens per turn", f"input {_number(tokens['input'], digits=0)}; output {_number(tokens['output'], digits=0)}")
    )
    rows.append(("Cached share of input (measured)", _share(evidence["cache"]["read_share"])))
    cost = evidence["cost_usd"]
    rows.append(("Cost per turn", _number(cost["per_turn"], unit="$", digits=5)))
    rows.append(("Cost per session", _number(cost["per_session"], unit="$", digits=4)))
    if cost["unpriced_turns"]:
        rows.append(("Unpriced turns", f"{cost['unpriced_turns']} (model without a known price: left out)"))
    rows.append(("Tool errors", _share(evidence["tool_errors"])))
    latency = evidence["latency_ms"]
    if latency["n"]:
        rows.append(("Reported latency", f"p50 {latency['p50']} ms, p95 {latency['p95']} ms, n = {latency['n']}"))
    return rows


def version_evidence_rows(version: BundleVersion, label: str | None = None) -> list[tuple[str, str]]:
    return evidence_rows(evidence_selectors.version_evidence(evidence_selectors.Arm(version, label)))


def evidence_summary(version: BundleVersion, label: str | None = None) -> str:
    """One line of a version's evidence (through `label`, or every label) for the drain
    dashboard (its final evidence once it drained) and a split's confirmation: the resolved
    share of its outcomes and its cost per session, each with its n."""
    evidence = evidence_selectors.version_evidence(evidence_selectors.Arm(version, label))
    outcomes = evidence["sessions"]["ended_with_outcome"]
    if not outcomes and not evidence["sessions"]["with_turns"]:
        return "no reports"
    resolved = evidence["outcomes"]["resolved"]
    parts = [f"resolved {_share(resolved)}" if outcomes else "no outcome reported"]
    cost = evidence["cost_usd"]["per_session"]
    if cost["value"] is not None:
        parts.append(f"${cost['value']:,.4f} per session (n = {cost['n']})")
    return "; ".join(parts)
