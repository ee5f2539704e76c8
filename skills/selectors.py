"""Reads for skills: a session's pinned content (parsed once per content hash per process)."""

from typing import Any

from django.db import connection

from core.compaction import policy_from_content
from core.tokens import estimate_tokens
from registry.parsed_content import content_document
from sessions_app.models import Session
from skills.content import MAX_L1_TOKENS, l1_tokens, render_card
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill, SkillTurn


def session_content(session: Session) -> dict[str, Any]:
    """The pinned version's content document, parsed once per content hash per process
    (registry.parsed_content); read-only."""
    version = session.version
    return content_document(version_id=version.pk, content_hash=version.content_hash)


def session_skills_list(*, session: Session) -> list[Any]:
    """The session's L3 cards still alive as of its latest routed turn."""
    current = SkillTurn.objects.filter(session=session).order_by("-number").values_list("number", flat=True).first()
    turn = current or 0
    return [
        c for c in SessionSkill.objects.filter(session=session) if turn - c.last_active_turn <= SESSION_SKILL_IDLE_TURNS
    ]


_METRICS_SQL = """
WITH turns AS (
    SELECT * FROM skills_skillturn WHERE version_id = %(version)s
), reported AS (
    SELECT * FROM turns WHERE invoked IS NOT NULL
)
SELECT
    (SELECT count(*) FROM turns) AS turns,
    (SELECT count(DISTINCT session_id) FROM turns) AS sessions,
    (SELECT count(*) FROM reported) AS reported_turns,
    (SELECT count(*) FROM reported r, jsonb_array_elements_text(r.invoked) AS name) AS invocations,
    (SELECT count(*) FROM reported r, jsonb_array_elements_text(r.invoked) AS name
        WHERE r.resident ? name OR r.routed ? name OR r.session_skills ? name) AS invocation_hits,
    (SELECT count(*) FROM reported r, jsonb_array_elements_text(r.routed) AS name) AS routed_loads,
    (SELECT count(*) FROM reported r, jsonb_array_elements_text(r.routed) AS name
        WHERE NOT r.invoked ? name) AS invalid_loads,
    (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_us) FROM turns) AS p50_us,
    (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_us) FROM turns) AS p99_us
"""


def version_skill_metrics(*, version_id: int) -> dict[str, Any]:
    """Routing metrics of one version, from its sessions' turns. Rates are fractions from 0 to 1
    (null before any reported turn):

    - load_hit_rate: of the skills the model invoked in reported turns, the share that were
      loaded that turn (resident, routed or session);
    - invalid_load_rate: of the routed (L2) skills loaded in reported turns, the share the model
      did not invoke that turn;
    - routing_latency_ms: p50 and p99 of the time the router took per turn (in process)."""
    with connection.cursor() as cursor:
        cursor.execute(_METRICS_SQL, {"version": version_id})
        row = cursor.fetchone()
        columns = [c.name for c in cursor.description]
    data = dict(zip(columns, row, strict=True))

    def rate(part: int, whole: int) -> float | None:
        return round(part / whole, 4) if whole else None

    def ms(value: float | None) -> float | None:
        return round(value / 1000, 3) if value is not None else None

    return {
        "turns": data["turns"],
        "sessions": data["sessions"],
        "reported_turns": data["reported_turns"],
        "invocations": data["invocations"],
        "routed_loads": data["routed_loads"],
        "load_hit_rate": rate(data["invocation_hits"], data["invocations"]),
        "invalid_load_rate": rate(data["invalid_loads"], data["routed_loads"]),
        "routing_latency_ms": {"p50": ms(data["p50_us"]), "p99": ms(data["p99_us"])},
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
