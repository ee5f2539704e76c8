"""Reads for skills: a session's pinned content (parsed once per content hash per process)."""

from typing import Any

from core.compaction import policy_from_content
from core.tokens import estimate_tokens
from metrics.selectors import latency_percentile_us, version_totals
from registry.lifecycle.labels import label_target_ids
from registry.models import BundleVersion, Label, VersionState
from registry.parsed_content import content_document
from registry.skills_content import MAX_L1_TOKENS, l1_tokens, render_card
from sessions_app.models import Session
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill, SkillTurn


def session_content(session: Session) -> dict[str, Any]:
    """The pinned version's content document, parsed once per content hash per process
    (registry.parsed_content); read-only."""
    version = session.version
    return content_document(version_id=version.pk, content_hash=version.content_hash)


def labelled_versions() -> list[tuple[int, str]]:
    """(id, content_hash) of every version not revoked that some label targets (its version or
    one of a split's targets), oldest first: what the skill index sweep keeps indexed."""
    ids: set[int] = set()
    for label in Label.objects.only("version_id", "targets"):
        ids.update(label_target_ids(label), [label.version_id])
    rows = BundleVersion.objects.filter(pk__in=ids).exclude(state=VersionState.REVOKED).order_by("pk")
    return list(rows.values_list("pk", "content_hash"))


def last_turn_number(session: Session) -> int | None:
    """The number of the session's latest routed turn; None before its first."""
    number: int | None = (
        SkillTurn.objects.filter(session=session).order_by("-number").values_list("number", flat=True).first()
    )
    return number


def session_skills_list(*, session: Session) -> list[Any]:
    """The session's L3 cards still alive as of its latest routed turn."""
    turn = last_turn_number(session) or 0
    return [
        c for c in SessionSkill.objects.filter(session=session) if turn - c.last_active_turn <= SESSION_SKILL_IDLE_TURNS
    ]


def version_skill_metrics(*, version_id: int) -> dict[str, Any]:
    """Routing metrics of one version, from its rolled-up counts (metrics.usage: added at each
    route and turn report, one row per version, so O(1) at any number of turns). Rates are
    fractions from 0 to 1 (null before any reported turn):

    - load_hit_rate: of the skills the model invoked in reported turns, the share that were
      loaded that turn (resident, routed or session);
    - invalid_load_rate: of the routed (L2) skills loaded in reported turns, the share the model
      did not invoke that turn;
    - decision_error_rate: of the reported turns that invoked a skill, the share that invoked
      one outside the loaded skills, or (when the report labelled the skills the turn needed,
      `expected`) a skill not among them;
    - routing_latency_ms: p50 and p99 of the time the router took per turn (in process), read
      from a histogram with four buckets per doubling (the bucket's upper bound: within 19 %)."""
    data = version_totals(version_id=version_id)

    def rate(part: int, whole: int) -> float | None:
        return round(part / whole, 4) if whole else None

    def ms(value: float | None) -> float | None:
        return round(value / 1000, 3) if value is not None else None

    return {
        "turns": data.turns,
        "sessions": data.routed_sessions,
        "reported_turns": data.reported_turns,
        "invocations": data.invocations,
        "routed_loads": data.routed_loads,
        "load_hit_rate": rate(data.invocation_hits, data.invocations),
        "invalid_load_rate": rate(data.invalid_loads, data.routed_loads),
        "decided_turns": data.decided_turns,
        "decision_error_rate": rate(data.decision_errors, data.decided_turns),
        "routing_latency_ms": {
            "p50": ms(latency_percentile_us(data.latency_buckets, 0.5)),
            "p99": ms(latency_percentile_us(data.latency_buckets, 0.99)),
        },
    }


def version_skills_panel(*, version_id: int, content: dict[str, Any]) -> dict[str, Any] | None:
    """What the admin's version page shows about skills: the cards, the resident budget, the
    compaction policy in force and the routing metrics. None when the version has no skills
    and no compaction policy (the page then shows nothing extra)."""
    skills = content.get("skills") or []
    if not skills and "compaction" not in content:
        return None
    tools = {t.get("name") for t in content.get("tools") or [] if isinstance(t, dict)}
    cards = [
        {
            **card,
            "tokens": estimate_tokens(render_card(card)) if card["level"] == "L1" else None,
            "has_tool": card["name"] in tools,
        }
        for card in skills
    ]
    return {
        "cards": cards,
        "l1_tokens": l1_tokens(skills),
        "l1_budget": MAX_L1_TOKENS,
        "compaction": vars(policy_from_content(content)),
        "metrics": version_skill_metrics(version_id=version_id),
    }
