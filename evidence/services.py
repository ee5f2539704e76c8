"""Every write of the evidence: a turn's usage report, a session's outcome, a score.

The rules: an outcome is reported once (the same again is a no-op, another one a 409); a score
is accepted while its session is active and up to EVIDENCE_SCORE_WINDOW_DAYS after it ended
(409 after), at most once per idempotency id; nothing is written when any field is refused."""

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from core import observe
from core.errors import Conflict, Forbidden, InvalidContent
from evidence import counts
from evidence.models import Outcome, Score, SessionOutcome
from evidence.pricing import price_of
from evidence.report import ToolResults, Usage
from sessions_app.models import Session, SessionStatus
from sessions_app.services import session_end

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
MAX_SCORE = 1e9
MAX_REASON = 1000
MAX_COMMENT = 4000


def turn_usage_delta(
    *, usage: Usage | None, tools: ToolResults, default_model: str | None, first: bool = False
) -> counts.Delta:
    """What one turn adds to its version's rollup: the turn (`first`: its session's first), its
    usage priced by evidence.pricing (the model the usage names, else the pinned content's),
    and its tool results."""
    delta = counts.Delta()
    delta.values["turns"] = 1
    delta.values["turn_sessions"] = 1 if first else 0
    delta.values["tool_results"] = tools.results
    delta.values["tool_errors"] = tools.errors
    if usage is None:
        return delta
    delta.values["usage_turns"] = 1
    tokens = {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "cache_read_tokens": usage.cache_read_tokens or 0,
        "cache_write_tokens": usage.cache_write_tokens or 0,
    }
    delta.values.update(tokens)
    prices = price_of(usage.model or default_model)
    if prices is not None:
        cost_in, cost_out = prices.cost(
            input_tokens=tokens["input_tokens"],
            output_tokens=tokens["output_tokens"],
            cache_read=tokens["cache_read_tokens"],
            cache_write=tokens["cache_write_tokens"],
        )
        delta.values.update(priced_turns=1, input_cost=cost_in, output_cost=cost_out, cost_sq=(cost_in + cost_out) ** 2)
    if usage.latency_ms is not None:
        delta.latency[counts.latency_bucket(usage.latency_ms)] += 1
    return delta


def turn_reported(
    *, session: Session, number: int, usage: Usage | None, tools: ToolResults, default_model: str | None
) -> None:
    """Count a turn call (`number`: its turn, 1 the session's first) with its report, after the
    turn's transaction commits (a turn that fails counts nothing); in memory, flushed in batches
    (evidence.counts): no statement of its own."""
    delta = turn_usage_delta(usage=usage, tools=tools, default_model=default_model, first=number == 1)
    transaction.on_commit(partial(counts.record, session.version_id, session.label, delta))


@dataclass(frozen=True)
class OutcomeIn:
    status: str
    reason: str


def outcome_in(value: Any) -> OutcomeIn:
    """The end's `outcome`, checked (400 naming the field)."""
    if not isinstance(value, dict):
        raise InvalidContent("outcome must be an object.", {"outcome": ["Expected a JSON object."]})
    unknown = sorted(set(value) - {"status", "reason"})
    if unknown:
        raise InvalidContent("Unknown fields in outcome.", {f"outcome.{n}": ["Unknown field."] for n in unknown})
    status = value.get("status")
    if status not in Outcome.values:
        raise InvalidContent("Unknown outcome.", {"outcome.status": [f"One of {', '.join(Outcome.values)}."]})
    reason = value.get("reason", "")
    if reason is None:
        reason = ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON or "\x00" in reason:
        raise InvalidContent("Bad reason.", {"outcome.reason": [f"A string of at most {MAX_REASON} characters."]})
    return OutcomeIn(status=status, reason=reason)


@transaction.atomic
def session_end_outcome(*, session: Session, actor: Actor, outcome: OutcomeIn) -> Session:
    """End `session` (if it is active) with its outcome, in one transaction. The same outcome
    again answers the session as it is; another one is refused (409) and ends nothing. An
    outcome for a session that ended (or expired) without one is recorded."""
    # The session row first, the lock order every end takes (registry.lifecycle.locks): two ends
    # with different outcomes at once are serialised here, and the second sees the first's row.
    Session.objects.select_for_update().filter(pk=session.pk).values_list("pk").first()
    existing = SessionOutcome.objects.filter(session=session).first()
    if existing is not None and existing.status != outcome.status:
        raise Conflict(
            f"Session {session.pk} ended with outcome {existing.status!r} already.",
            {"outcome": {"status": existing.status, "reason": existing.reason}},
        )
    session = session_end(session=session, actor=actor)  # owner or ops (403), as a plain end
    if existing is None:
        SessionOutcome.objects.create(session=session, status=outcome.status, reason=outcome.reason, at=timezone.now())
        delta = counts.Delta()
        delta.values["outcomes"] = 1
        delta.values[outcome.status] = 1
        shard = counts.shard_of(session.pk)  # ends at once rarely share a row lock (evidence.counts)
        counts.add_now(version_id=session.version_id, label=session.label, delta=delta, shard=shard)
    return session


@dataclass(frozen=True)
class ScoreIn:
    name: str
    value: float
    source: str
    comment: str
    client_id: str | None


def _text_error(value: Any, limit: int) -> bool:
    return not isinstance(value, str) or len(value) > limit or "\x00" in value


def score_in(data: Any) -> ScoreIn:
    """A score's body, checked (400 naming each bad field)."""
    if not isinstance(data, dict):
        raise InvalidContent("Send a JSON object.", {"body": ["Expected a JSON object."]})
    errors: dict[str, list[str]] = {
        n: ["Unknown field."] for n in sorted(set(data) - {"name", "value", "source", "comment", "id"})
    }
    name, value = data.get("name"), data.get("value")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        errors["name"] = ["1 to 100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit."]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not isinstance(value, int | float) or not number or not math.isfinite(value) or abs(value) > MAX_SCORE:
        errors["value"] = [f"A finite number between -{MAX_SCORE:g} and {MAX_SCORE:g}."]
    source, comment, client_id = data.get("source") or "", data.get("comment") or "", data.get("id")
    if _text_error(source, 100):
        errors["source"] = ["A string of at most 100 characters (user, judge, human, or your own)."]
    if _text_error(comment, MAX_COMMENT):
        errors["comment"] = [f"A string of at most {MAX_COMMENT} characters."]
    if client_id is not None and (_text_error(client_id, 200) or not client_id):
        errors["id"] = ["A string of 1 to 200 characters."]
    if errors:
        raise InvalidContent("Bad score.", errors)
    assert isinstance(name, str) and isinstance(value, int | float)  # checked above
    return ScoreIn(name=name, value=float(value), source=source, comment=comment, client_id=client_id)


def score_window() -> timedelta:
    return timedelta(days=settings.EVIDENCE_SCORE_WINDOW_DAYS)


@transaction.atomic
def score_record(*, session: Session, actor: Actor, score: ScoreIn) -> tuple[Score, bool]:
    """Record a score of `session` (seen by `actor`: its key or ops); (score, created). The same
    `id` again answers the score recorded first and counts nothing."""
    if not (actor.owns(session.api_key_id) or actor.has_role(Role.OPS)):
        raise Forbidden("Only the key that started a session, or ops, may score it.")
    # The session row first (the lock order of every session write): a score racing the end
    # reads the end's ended_at once it committed.
    locked = Session.objects.select_for_update().only("status", "ended_at").get(pk=session.pk)
    if score.client_id is not None:
        found = Score.objects.filter(session=session, client_id=score.client_id).first()
        if found is not None:
            return found, False
    now = timezone.now()
    if locked.status != SessionStatus.ACTIVE and locked.ended_at is not None and now > locked.ended_at + score_window():
        days = settings.EVIDENCE_SCORE_WINDOW_DAYS
        raise Conflict(
            f"Session {session.pk} ended more than {days} days ago; its scores are closed.",
            {"ended_at": locked.ended_at.isoformat(), "window_days": days},
        )
    row = Score.objects.create(
        session=session,
        client_id=score.client_id,
        name=score.name,
        value=score.value,
        source=score.source,
        comment=score.comment,
        at=now,
    )
    counts.score_add_now(version_id=session.version_id, label=session.label, name=score.name, value=score.value)
    observe.score_recorded(name=score.name, value=score.value, source=score.source, comment=score.comment)
    return row, True
