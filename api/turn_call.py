"""One call per turn (`POST /sessions/{id}/turn/`, docs/api.md#the-turn-call): the report of the
previous turn, the route, the render and the compaction on one read of the session, answered
together, with the provider request laid out by `core.providers`. Its entry is `turn` in the
route table (api/routes.py), so both HTTP lanes serve it.

It composes two feature apps, knowledge (the render) and skills (routing, reports), which the
package layers keep independent of each other (pyproject.toml), so the composition sits in the
entry-point layer, beside the route table that calls it; it holds no rule of its own beyond
checking the fields before anything is written.

It is the four per-turn calls composed, not a second implementation of them: the report is
`skills.services.skill_turn_report`, the route `skill_route`, the render
`knowledge.render.render_session`, the compaction `core.compaction.compact`, in that order
(the report first, because routing reads the previous turns' invocations), inside one
transaction, after every field of the request was checked, so a malformed field changes
nothing (no turn opened, no notice claimed)."""

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from access.actors import Actor
from core import observe, provider_input, provider_messages, providers
from core.compaction import CompactionError, compact, policy_from_content
from core.errors import InvalidContent
from evidence import report as evidence_report
from evidence import services as evidence_services
from knowledge.render import render_session
from modelcatalog import selectors as catalog
from registry import guard
from registry import variables as content_variables
from registry.parsed_content import content_document
from sessions_app.models import Session
from sessions_app.turns import UNREAD, Loaded, session_for_turn
from skills import services as skill_services
from skills.models import SessionSkill, SkillTurn
from skills.turn_request import provider_request, turn_cards, turn_text

FIELDS = {"messages", "invoked", "variables", "prefix_sha256", "format", "k", "model", "window", "response", "usage"}
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_MODEL_NAME = 200


@dataclass(frozen=True)
class TurnRequest:
    messages: list[dict[str, Any]]
    invoked: list[str] | None
    variables: dict[str, Any] | None
    prefix_sha256: str | None
    format: str | None
    k: int
    # the conversation as read for `format` (core.provider_input): `messages` is its neutral shape
    conversation: provider_input.Read | None = None
    model: str | None = None
    usage: evidence_report.Usage | None = None  # the previous model call's, as reported
    tools: evidence_report.ToolResults = evidence_report.ToolResults()


def _windowed(messages: Any, size: Any) -> Any:
    """`messages` cut to a valid window of at most `size` (docs/api.md#windows)."""
    if size is None:
        return messages
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= skill_services.MAX_MESSAGES:
        raise InvalidContent(
            "window is out of range.", {"window": [f"A number of messages from 1 to {skill_services.MAX_MESSAGES}."]}
        )
    if not isinstance(messages, list):
        return messages  # check_messages names it
    cut = provider_input.window(messages, size)
    if cut is None:
        raise InvalidContent(
            "No valid window.",
            {"window": [f"None of the last {size} messages is a user message a window can start at."]},
        )
    return cut


def _read(fmt: str | None, messages: Any) -> provider_input.Read | None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return None  # check_messages names what is wrong
    if len(messages) > skill_services.MAX_MESSAGES:
        return None
    try:
        return provider_input.read(fmt, messages)
    except provider_input.Unfit as exc:
        raise InvalidContent("A message does not fit the format.", {exc.path: [exc.message]}) from None


def parse(body: Any) -> TurnRequest:
    """Every field checked, before anything is written; 400 in the contract's shape naming the
    field. messages: as route takes them (at most skills.services.MAX_MESSAGES), in a shape the
    compaction reads; k: 1..MAX_K; invoked: at most 100 skill names; variables: an object
    (checked against the pinned declarations by the render); prefix_sha256: 64 lowercase hex."""
    if body is None:  # no body: as an empty object (the Django lane parses it so), messages missing
        body = {}
    if not isinstance(body, dict):
        raise InvalidContent("Send a JSON object.", {"body": ["Expected a JSON object."]})
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise InvalidContent("Unknown fields.", {name: ["Unknown field."] for name in unknown})
    fmt = body.get("format")
    if fmt is not None and fmt not in providers.FORMATS:
        raise InvalidContent("Unknown format.", {"format": [f"One of {', '.join(providers.FORMATS)}, or absent."]})
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME):
        raise InvalidContent("model is not a model name.", {"model": [f"A name of 1 to {MAX_MODEL_NAME} characters."]})
    # the previous model call's usage, from `response` (in this format) and/or `usage`
    # (evidence.report: 400 for a response of another format, negative or absurd figures)
    usage = evidence_report.reported_usage(fmt, body.get("response"), body.get("usage"))
    # tool errors in the format's own shape, before it is read into the neutral one
    tools = evidence_report.tool_results(body.get("messages"))
    # a conversation in the format's own shape is read into the neutral one (core.provider_input)
    conversation = _read(fmt, _windowed(body.get("messages"), body.get("window")))
    neutral = conversation.neutral if conversation is not None else body.get("messages")
    messages = skill_services.check_messages(neutral)
    try:
        json.dumps(messages, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidContent("The messages hold text that is not valid Unicode.", {"messages": ["Lone surrogate."]})
    except (TypeError, ValueError, RecursionError):
        raise InvalidContent("The messages are not JSON this can answer.", {"messages": ["Not serialisable."]})
    k = skill_services.check_k(body.get("k"))
    invoked = body.get("invoked")
    if invoked is not None:
        invoked = skill_services.check_names(invoked, "invoked")
    variables = body.get("variables")
    if variables is not None and not isinstance(variables, dict):
        raise InvalidContent("variables must be an object.", {"variables": ["Expected a JSON object."]})
    sha = body.get("prefix_sha256")
    if sha is not None and (not isinstance(sha, str) or not SHA256_RE.fullmatch(sha)):
        raise InvalidContent("prefix_sha256 is not a SHA-256.", {"prefix_sha256": ["64 lowercase hex digits."]})
    return TurnRequest(
        messages=messages,
        invoked=invoked,
        variables=variables,
        prefix_sha256=sha,
        format=fmt,
        k=k,
        conversation=conversation,
        model=model,
        usage=usage,
        tools=tools,
    )


def _model(content: dict[str, Any], override: str | None) -> dict[str, Any]:
    """The model settings of the request: the pinned version's, with the call's `model` when
    the version allows it (it names no model, names that one, or lists it in `model.allowed`).
    400 naming `model` when no model would be sent: every provider requires one."""
    settings = dict(content.get("model") or {})
    pinned = providers.model_name(settings)
    if override is not None and override != pinned:
        allowed = settings.get("allowed")
        if pinned is not None and not (isinstance(allowed, list) and override in allowed):
            names = ", ".join(str(a) for a in allowed) if isinstance(allowed, list) else pinned
            raise InvalidContent("The pinned version does not allow that model.", {"model": [f"One of: {names}."]})
        for key in ("model", "id"):
            settings.pop(key, None)
        settings["name"] = override
    if providers.model_name(settings) is None:
        raise InvalidContent(
            "No model to send.",
            {"model": ["The pinned version names no model (content.model.name): send `model` with the turn call."]},
        )
    return settings


def _conversation_check(request: TurnRequest, compacted: list[dict[str, Any]]) -> None:
    """400 naming the first message the provider would refuse (core.provider_messages)."""
    if request.format is None:
        return
    problem = provider_messages.conversation_problem(request.format, compacted)
    if problem is None:
        return
    index, message = problem
    if request.conversation is not None:
        index = request.conversation.item_of(index)
    raise InvalidContent(
        "The conversation is not one the provider accepts.",
        {f"messages[{index}]": [message, provider_messages.WINDOW_HINT]},
    )


# The per-turn text the registry wrote into an earlier request (skills.turn_request.turn_text:
# the render's tail first), found again in a conversation a client sent back.
_TURN_TEXT = re.compile(r"Current date: \d{4}-\d{2}-\d{2}\nCurrent time: \d{2}:\d{2} \(")


def _is_turn_text(value: Any) -> bool:
    return isinstance(value, str) and _TURN_TEXT.match(value) is not None


def for_routing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the router reads it: without the per-turn texts of earlier requests
    (a client that sends back the conversation it sent the model has them in its history), so
    the skill cards shown on earlier turns do not pull the routing towards themselves. Only
    routing reads this; the compaction and the request keep the messages as sent."""
    out = []
    for message in messages:
        content = message.get("content")
        if _is_turn_text(content):
            continue
        if isinstance(content, list) and any(isinstance(p, dict) and _is_turn_text(p.get("text")) for p in content):
            kept = [p for p in content if not (isinstance(p, dict) and _is_turn_text(p.get("text")))]
            message = {**message, "content": kept}
        out.append(message)
    return out


def _report_previous(session: Session, invoked: list[str]) -> dict[str, Any] | None:
    previous = SkillTurn.objects.filter(session=session).order_by("-number").values_list("number", flat=True).first()
    if previous is None:
        if invoked:
            raise InvalidContent(
                "There is no previous turn to report.", {"invoked": ["This session has no routed turn yet."]}
            )
        return None
    row = skill_services.skill_turn_report(session=session, turn=previous, invoked=invoked)
    return {"turn": row.number, "invoked": row.invoked}


def session_turn(*, session_id: Any, actor: Actor, body: Any, loaded: Loaded = UNREAD) -> dict[str, Any]:
    """The turn call: renews the lease once (404, 410 session_ended / version_revoked as every
    session call), then reports, routes, renders and compacts on that one read. `loaded`: the
    session as the fast lane read it already (sessions_app.turns)."""
    request = parse(body)
    session = session_for_turn(session_id=session_id, actor=actor, loaded=loaded)
    return turn_for_session(session=session, actor=actor, request=request)


def _built(fmt: str, **parts: Any) -> providers.ProviderRequest:
    """The provider request; a content part the format cannot carry is a 400 (raised inside the
    turn's transaction, so the route it wrote is rolled back with it)."""
    try:
        return provider_request(fmt, **parts)
    except provider_input.Unfit as exc:
        raise InvalidContent("A message does not fit the format.", {exc.path: [exc.message]}) from None


def _in_format(request: TurnRequest, compacted: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The compacted conversation in the format's own shape when the client sent items in that
    shape (they come back as sent, docs/api.md#conversations-in-a-formats-own-shape); None for
    a neutral conversation (answered in the neutral shape)."""
    read = request.conversation
    if request.format is None or read is None or not any(read.native):
        return None
    try:
        written = provider_input.write(read, compacted, provider_messages.convert_run)
    except provider_input.Unfit as exc:
        raise InvalidContent("A message does not fit the format.", {exc.path: [exc.message]}) from None
    return provider_messages.merge_roles(request.format, written)


@transaction.atomic
def turn_for_session(*, session: Session, actor: Actor, request: TurnRequest) -> dict[str, Any]:
    """The turn of a session already read, checked and touched for `actor` (session_use, or a
    fast lane's own read). One transaction: a turn variable the pinned version refuses, or
    messages the compaction cannot read, leave no routed turn and no claimed notice."""
    version = session.version
    content = content_document(version_id=version.pk, content_hash=version.content_hash)
    try:  # the render checks them too; here first, before the report and the route write
        content_variables.resolve(content.get("variables"), request.variables, scope="turn")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None
    if session.bundle.strict_conversation:  # read with the session (sessions_app.selectors.pinned_row)
        guard.check_messages(request.messages)  # before anything is reported or routed
    model = _model(content, request.model) if request.format is not None else content.get("model") or {}
    policy = policy_from_content(content)
    try:
        compacted = compact(request.messages, policy)
    except CompactionError as exc:
        raise InvalidContent("The messages are not in a chat shape this reads.", {exc.path: [exc.message]}) from None
    _conversation_check(request, compacted.messages)
    conversation = _in_format(request, compacted.messages)
    reported = _report_previous(session, request.invoked) if request.invoked is not None else None
    route = skill_services.skill_route(session=session, messages=for_routing(request.messages), k=request.k)
    rendered = render_session(session=session, actor=actor, variables=request.variables)
    prefix = rendered.prefix
    session_cards = (
        list(SessionSkill.objects.filter(session=session, name__in=route["session"])) if route["session"] else []
    )
    answer: dict[str, Any] = {
        "turn": route["turn"],
        "version": rendered.version,
        "content_hash": rendered.content_hash,
        "prefix_sha256": prefix.sha256,
    }
    unchanged = request.prefix_sha256 == prefix.sha256
    if unchanged:
        answer["prefix_unchanged"] = True
    else:
        answer["prefix"] = {"system": prefix.system, "tools": prefix.tools}
    answer["tail"] = rendered.tail
    retiring = catalog.retirement_notice(model)  # the model this turn names (the pinned one, or the call's)
    answer["notices"] = [*rendered.notices, retiring] if retiring else rendered.notices
    answer["skills"] = {
        "resident": route["resident"],
        "routed": route["routed"],
        "session": route["session"],
        "demoted": route["demoted"],
        "categories": route["categories"],
    }
    answer["reported"] = reported
    answer["messages"] = conversation if conversation is not None else compacted.messages
    answer["turn_text"] = turn_text(rendered.tail, turn_cards(content, route, session_cards))
    answer["compaction"] = {key: value for key, value in compacted.as_dict().items() if key != "messages"}
    if request.format is not None:
        built = _built(
            request.format,
            content={**content, "model": model},
            system=prefix.system,
            tools=prefix.tools,
            prefix_sha256=prefix.sha256,
            messages=compacted.messages,
            tail=rendered.tail,
            route=route,
            session_cards=session_cards,
            conversation=conversation,
        )
        if unchanged:  # the client holds the stable part: leave it out, say how to put it back
            answer["request_reuse"] = built.reuse()
        answer["format"] = request.format
        answer["request"] = built.without_stable() if unchanged else built.body
        if built.notes:
            answer["request_notes"] = built.notes
    floor, source = catalog.cache_floor(model)
    answer["cache"] = providers.cache_report(
        system=prefix.system, tools=prefix.tools, floor=floor, source=source, prefix_sha256=prefix.sha256
    )
    if request.usage is not None:
        observe.usage_reported(dataclasses.asdict(request.usage))
    # Counted after the commit, in memory (batched): the report adds no statement to the turn.
    evidence_services.turn_reported(
        session=session, number=route["turn"], usage=request.usage, tools=request.tools, default_model=model.get("name")
    )
    return answer
