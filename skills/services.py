"""Writes for skills: a routed turn, a turn's report, session (L3) skills.

Every service takes the session already resolved by `sessions_app.services.session_use`,
which checks that the actor may see it (the key that started it, or ops) and that it is active
and not revoked: an ended session has no routing, no turns and no L3 skills."""

import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core import instruments
from core.errors import Conflict, InvalidContent, NotFound, SessionEnded
from core.limits import storable
from registry.skills_content import MAX_DESCRIPTION, MAX_NAME, MAX_SUMMARY, NAME_RE
from sessions_app.models import Session, SessionStatus
from skills.card_vectors import RedisCardCache
from skills.embedding import Embedder, RemoteEmbedder
from skills.index_store import routing_index
from skills.models import SESSION_SKILL_IDLE_TURNS, SessionSkill, SkillTurn
from skills.router import History
from skills.selectors import session_content

MAX_SESSION_SKILLS = 20
MAX_K = 20
MAX_MESSAGES = 500
# Content parts (list items of a message's content: text, image, tool_use, tool_result blocks)
# and tool calls (an assistant message's `tool_calls`) per request and per message. The work of
# a turn (the compaction, the conversion to a provider's shape, the answer's bytes) grows with
# them, not with the messages: 120 assistant messages of 100 tool calls each (inside 2 MiB and
# 500 messages) took 0.9 s of CPU and answered 2.9 MB. An agent's long conversation stays far
# inside these: 500 messages of a few parts and a few parallel tool calls each; 128 per message
# is the most tool definitions OpenAI accepts in one request, so no model asks for more at once.
MAX_PARTS = 2000
MAX_TOOL_CALLS = 1000
MAX_PER_MESSAGE = 128
MAX_SOURCE = 200
MAX_TURN = 2**31 - 1  # the column is a PostgreSQL integer
ROLES = {"user", "assistant", "system", "tool", "developer"}


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise InvalidContent("Send the conversation so far.", {"messages": ["Must be a non-empty list of messages."]})
    if len(messages) > MAX_MESSAGES:
        raise InvalidContent(
            "Too many messages.",
            {
                "messages": [
                    f"At most {MAX_MESSAGES}. Send a window of the recent ones that starts at a user message and "
                    "never between a tool call and its result: the turn call's `window` field cuts one."
                ]
            },
        )
    parts = tool_calls = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise InvalidContent(
                "Each message needs a role.", {f"messages[{i}].role": ["Must be user, assistant or system."]}
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidContent("Message content must be text.", {f"messages[{i}].content": ["Must be a string."]})
        calls = message.get("tool_calls")
        for field, items in (("content", content), ("tool_calls", calls)):
            if isinstance(items, list) and len(items) > MAX_PER_MESSAGE:
                raise InvalidContent(
                    f"A message holds over {MAX_PER_MESSAGE} {field.replace('_', ' ')}.",
                    {f"messages[{i}].{field}": [f"At most {MAX_PER_MESSAGE} per message."]},
                )
        parts += len(content) if isinstance(content, list) else 0
        tool_calls += len(calls) if isinstance(calls, list) else 0
    if parts > MAX_PARTS:
        raise InvalidContent(
            "Too many content parts.",
            {"messages": [f"At most {MAX_PARTS} content parts in all; send the recent ones."]},
        )
    if tool_calls > MAX_TOOL_CALLS:
        raise InvalidContent(
            "Too many tool calls.", {"messages": [f"At most {MAX_TOOL_CALLS} tool calls in all; send the recent ones."]}
        )
    if not any(m["role"] == "user" for m in messages):
        raise InvalidContent("Nothing to route.", {"messages": ["The conversation has no user message."]})
    return messages


def _check_k(k: Any) -> int:
    if k is None:
        return 5
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise InvalidContent("k is out of range.", {"k": [f"Must be an integer from 1 to {MAX_K}."]})
    return k


def _live_session_skills(session: Session, turn: int) -> list[SessionSkill]:
    """The session's L3 cards still alive at `turn`; lapsed ones are deleted on the way."""
    cards = list(SessionSkill.objects.filter(session=session))
    lapsed = [c.pk for c in cards if turn - c.last_active_turn > SESSION_SKILL_IDLE_TURNS]
    if lapsed:
        SessionSkill.objects.filter(pk__in=lapsed).delete()
    return [c for c in cards if c.pk not in lapsed]


_embedders: dict[tuple[str, str, str, int], RemoteEmbedder] = {}


def route_embedder() -> Embedder | None:
    """The configured embeddings endpoint (settings.SKILLS_EMBEDDING_*), one client per
    configuration per process; None: the offline models."""
    if not settings.SKILLS_EMBEDDING_URL:
        return None
    key = (
        settings.SKILLS_EMBEDDING_URL,
        settings.SKILLS_EMBEDDING_MODEL,
        settings.SKILLS_EMBEDDING_KEY,
        settings.SKILLS_EMBEDDING_TIMEOUT_MS,
    )
    embedder = _embedders.get(key)
    if embedder is None:
        embedder = _embedders[key] = RemoteEmbedder(url=key[0], model=key[1], api_key=key[2], timeout=key[3] / 1000)
        embedder.card_cache = RedisCardCache()
    return embedder


def skill_route(*, session: Session, messages: Any, k: Any = None) -> dict[str, Any]:
    """Open the session's next turn: route its skills and record what was loaded."""
    messages = _check_messages(messages)
    k = _check_k(k)
    content = session_content(session)
    skills = content.get("skills") or []
    previous = list(SkillTurn.objects.filter(session=session).order_by("-number")[:2])
    history = History(
        loaded=[frozenset(t.routed) for t in previous],
        invoked=[frozenset(t.invoked) if t.invoked is not None else None for t in previous],
    )
    # the full index once per content hash per process (or the worker's), keywords until then
    index, routing = routing_index(session.version.content_hash, skills, route_embedder())
    started = time.perf_counter()  # the metric is the routing itself, not the one-time index build
    result = index.route(messages, k=k, history=history)
    latency_us = int((time.perf_counter() - started) * 1_000_000)
    number = (previous[0].number if previous else 0) + 1
    cards = _live_session_skills(session, number)
    turn = None
    for _attempt in range(3):
        try:
            # A savepoint: two route calls racing for one number, the loser takes the next one.
            with transaction.atomic():
                turn = SkillTurn.objects.create(
                    session=session,
                    version_id=session.version_id,
                    number=number,
                    resident=result.resident,
                    routed=[r["name"] for r in result.routed],
                    session_skills=[c.name for c in cards],
                    latency_us=latency_us,
                )
            break
        except IntegrityError:
            number = (
                SkillTurn.objects.filter(session=session).order_by("-number").values_list("number", flat=True).first()
                or 0
            ) + 1
    if turn is None:
        raise Conflict("Too many concurrent route calls for this session; retry.")
    instruments.turn_routed(session.version_id, number=number, latency_us=latency_us)
    return {
        "resident": result.resident,
        "routed": result.routed,
        "session": [c.name for c in cards],
        "categories": result.categories,
        "demoted": result.demoted,
        "turn": number,
        "routing": routing,
    }


def route_preview(
    *,
    content_hash: str,
    skills: list[dict[str, Any]],
    messages: Any,
    k: Any = None,
    earlier: Sequence[dict[str, Any] | None] = (),
) -> dict[str, Any]:
    """What skill_route answers on a turn of a session of this content with no session skills,
    writing nothing: the admin's previews. `earlier`: the session's previous turns, oldest
    first, each as {"routed": [names routed], "invoked": [names the model called] or None (not
    reported)} or None (not known: a turn that loaded nothing and was not reported); what the
    database's skill turns give the route (the ghost rule reads the last two). No earlier turns:
    the first turn of a new session."""
    messages = _check_messages(messages)
    k = _check_k(k)
    last_two = [turn or {} for turn in list(earlier)[-2:]][::-1]  # newest first, as History reads them
    history = History(
        loaded=[frozenset(turn.get("routed") or ()) for turn in last_two],
        invoked=[None if turn.get("invoked") is None else frozenset(turn["invoked"]) for turn in last_two],
    )
    index, routing = routing_index(content_hash, skills, route_embedder())
    result = index.route(messages, k=k, history=history)
    return {
        "resident": result.resident,
        "routed": result.routed,
        "session": [],
        "categories": result.categories,
        "demoted": result.demoted,
        "turn": len(earlier) + 1,
        "routing": routing,
    }


def _check_names(values: Any, field: str) -> list[str]:
    # NUL cannot be stored in PostgreSQL text or jsonb; no skill name holds one anyway.
    if not isinstance(values, list) or not all(
        isinstance(v, str) and 0 < len(v) <= MAX_NAME and storable(v) for v in values
    ):
        raise InvalidContent(f"{field} must list skill names.", {field: ["Must be a list of skill names."]})
    if len(values) > 100:
        raise InvalidContent(f"Too many {field}.", {field: ["At most 100 names."]})
    return list(dict.fromkeys(values))


@transaction.atomic
def skill_turn_report(*, session: Session, turn: Any, invoked: Any, expected: Any = None) -> SkillTurn:
    """Record what the model invoked in `turn` (replacing an earlier report of that turn), and
    optionally a label of the skills the turn needed (`expected`, for the decision error rate)."""
    if not isinstance(turn, int) or isinstance(turn, bool) or not 1 <= turn <= MAX_TURN:
        raise InvalidContent("turn must be a turn number.", {"turn": ["Must be a positive integer."]})
    names = _check_names(invoked, "invoked")
    needed = None if expected is None else _check_names(expected, "expected")
    row = SkillTurn.objects.select_for_update().filter(session=session, number=turn).first()
    if row is None:
        raise NotFound(f"Turn {turn} of this session was never routed.")
    before, expected_before = row.invoked, row.expected
    row.invoked, row.expected = names, needed
    row.reported_at = timezone.now()
    row.save(update_fields=["invoked", "expected", "reported_at"])
    instruments.turn_reported(
        row.version_id,
        loaded={*row.resident, *row.routed, *row.session_skills},
        routed=list(row.routed),
        before=before,
        after=names,
        expected_before=expected_before,
        expected=needed,
    )
    # An invoked L3 card stays alive for another SESSION_SKILL_IDLE_TURNS turns.
    SessionSkill.objects.filter(session=session, name__in=names).exclude(last_invoked_turn__gte=turn).update(
        last_invoked_turn=turn
    )
    return row


def _text(data: dict[str, Any], key: str, limit: int) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise InvalidContent(f"{key} is not valid.", {key: [f"Must be a non-empty string of at most {limit}."]})
    if not storable(value):
        raise InvalidContent(f"{key} is not valid.", {key: ["Must be valid Unicode text without NUL characters."]})
    return value


def _lock_active_session(session: Session) -> None:
    status = (
        Session.objects.select_for_update(no_key=True).filter(pk=session.pk).values_list("status", flat=True).first()
    )
    if status != SessionStatus.ACTIVE:
        raise SessionEnded(f"Session {session.pk} has ended; start a new session.")


@transaction.atomic
def session_skill_register(*, session: Session, data: Any) -> tuple[SessionSkill, bool]:
    """Register (or replace, by name) a temporary card for this session only."""
    if not isinstance(data, dict):
        raise InvalidContent("Send a skill card.", {"name": ["This field is required."]})
    unknown = sorted(set(data) - {"name", "summary", "description", "source"})
    if unknown:
        raise InvalidContent("Unknown fields.", {key: ["Unknown field."] for key in unknown})
    name = _text(data, "name", MAX_NAME)
    if not NAME_RE.fullmatch(name):
        raise InvalidContent("name must be snake_case.", {"name": ["Must match ^[a-z][a-z0-9]*(_[a-z0-9]+)*$."]})
    fields = {
        "summary": _text(data, "summary", MAX_SUMMARY),
        "description": _text(data, "description", MAX_DESCRIPTION),
        "source": _text(data, "source", MAX_SOURCE),
    }
    skills = session_content(session).get("skills") or []
    if any(s["name"] == name for s in skills):
        raise Conflict(f"The bundle already has a skill named {name!r}; pick another name.")
    # The lock order (registry.lifecycle): the session row, then its cards. An end locks the
    # session and then deletes the cards; taking the cards first (and the foreign key's share
    # lock on the session only at the insert) waited on it in a cycle. FOR NO KEY UPDATE: two
    # registrations on one session are serial (the count check below holds), an end waits for
    # this commit, and a registration behind an end sees the session ended.
    _lock_active_session(session)
    existing = list(SessionSkill.objects.select_for_update().filter(session=session))
    current = SkillTurn.objects.filter(session=session).order_by("-number").values_list("number", flat=True).first()
    turn = current or 0
    alive = [c for c in existing if turn - c.last_active_turn <= SESSION_SKILL_IDLE_TURNS]
    mine = next((c for c in existing if c.name == name), None)
    if mine is None and len(alive) >= MAX_SESSION_SKILLS:
        raise Conflict(f"A session holds at most {MAX_SESSION_SKILLS} session skills; delete one first.")
    if mine is not None:
        for key, value in fields.items():
            setattr(mine, key, value)
        mine.registered_turn = turn
        mine.save(update_fields=[*fields, "registered_turn"])
        return mine, False
    return SessionSkill.objects.create(session=session, name=name, registered_turn=turn, **fields), True


def session_skill_remove(*, session: Session, name: str) -> None:
    deleted, _ = SessionSkill.objects.filter(session=session, name=name).delete()
    if not deleted:
        raise NotFound(f"No session skill {name!r}.")


def session_cards_drop(session_ids: list[str]) -> None:
    """Delete the L3 cards of sessions that just ended or expired (sessions_app.hooks calls it
    inside the end's transaction, with the session rows locked; skills/apps.py registers it)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM skills_sessionskill WHERE session_id = ANY(%s::uuid[])", [session_ids])


# The checks of the route and report fields, for the turn call (turns.request), which
# checks every field before it writes anything.
check_messages = _check_messages
check_k = _check_k
check_names = _check_names
