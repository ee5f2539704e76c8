"""One call per turn (`POST /sessions/{id}/turn/`, docs/api.md#the-turn-call): the report of the
previous turn, the route, the render and the compaction on one read of the session, answered
together, with the provider request laid out by `turns.layout`. Its entry is `turn` in the
route table (api/routes.py), so both HTTP lanes serve it; the admin's provider preview and
MCP's take_turn are built from the same steps (turns.preview, `session_steps`).

The turn composes two feature apps, knowledge (the render) and skills (routing, reports),
which the package layers keep independent of each other (pyproject.toml); `turns` is the
layer above them and below the entry points, and holds no rule of its own beyond checking
the fields before anything is written (turns.request).

It is the four per-turn calls composed, not a second implementation of them: the report is
`skills.turn_state` (skills.services.skill_turn_report's rules), the route `skill_route`'s (the
same module), the render `knowledge.render.render_session`, the compaction
`core.compaction.compact`, in that order (the report first, because routing reads the previous
turns' invocations). Every field of the request is checked before anything is written, so a
malformed field changes nothing (no turn opened, no notice claimed). The order of the steps:

1. `prepare` (pure): the model, the compaction, the provider's conversation rules;
2. the session's per-turn state read in one round trip (turns.state), the report and the route
   computed on it (skills.turn_state.plan), the render;
3. `lay_out` (pure): the per-turn text and the provider request;
4. the report and the route written in one statement (skills.turn_state.write).

`session_steps` is steps 2 and 4 in one, for MCP's take_turn (inside its own transaction)."""

import contextlib
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from access.actors import Actor
from core import observe
from core.compaction import CompactionError, CompactionResult, compact, policy_from_content
from core.errors import InvalidContent
from evidence import services as evidence_services
from knowledge.render import Rendered, render_session
from knowledge.selectors import packs_reachable
from modelcatalog import selectors as catalog
from registry import guard
from registry import variables as content_variables
from registry.parsed_content import content_document
from sessions_app.models import Session
from sessions_app.turns import UNREAD, Loaded, session_for_turn
from skills import turn_state
from turns import provider_input, provider_messages, providers
from turns.layout import provider_request, turn_cards, turn_text
from turns.request import TurnRequest, parse
from turns.state import Prefetch, read_state


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
    """400 naming the first message the provider would refuse (turns.provider_messages)."""
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


# The per-turn text the registry wrote into an earlier request (turns.layout.turn_text: the
# render's tail first), found again in a conversation a client sent back.
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


def compacted_for(content: dict[str, Any], messages: list[dict[str, Any]]) -> CompactionResult:
    """`messages` compacted by the pinned version's policy; 400 for a shape it cannot read."""
    try:
        return compact(messages, policy_from_content(content))
    except CompactionError as exc:
        raise InvalidContent("The messages are not in a chat shape this reads.", {exc.path: [exc.message]}) from None


def turn_variables(content: dict[str, Any], variables: Any) -> dict[str, Any]:
    """The turn's variables resolved against the pinned declarations (400 for what they refuse)."""
    if variables is not None and not isinstance(variables, dict):
        raise InvalidContent("variables must be an object.", {"variables": ["Expected a JSON object."]})
    try:
        return content_variables.resolve(content.get("variables"), variables, scope="turn")
    except content_variables.VariableError as exc:
        raise InvalidContent(exc.message, exc.details) from None


@dataclass(frozen=True)
class Prepared:
    """Step 1, pure: what the request says once checked against the pinned content."""

    model: dict[str, Any]
    compacted: CompactionResult
    conversation: list[dict[str, Any]] | None  # the compacted messages in the format's own shape


def prepare(request: TurnRequest, content: dict[str, Any]) -> Prepared:
    """Everything that can refuse the request without a write: the model, the compaction, the
    provider's conversation rules and the conversation in the format's own shape."""
    model = _model(content, request.model) if request.format is not None else content.get("model") or {}
    compacted = compacted_for(content, request.messages)
    _conversation_check(request, compacted.messages)
    return Prepared(model=model, compacted=compacted, conversation=_in_format(request, compacted.messages))


@dataclass(frozen=True)
class Steps:
    """Step 2, the writes: the report, the route, the render and the session's own (L3) cards."""

    reported: dict[str, Any] | None
    route: dict[str, Any]
    rendered: Rendered
    session_cards: list[Any]


def session_steps(
    *,
    session: Session,
    actor: Actor,
    messages: list[dict[str, Any]],
    invoked: list[str] | None,
    k: int | None = None,
    variables: Any = None,
) -> Steps:
    """Report (when `invoked` is given), route on `messages`, render: the services of POST
    .../turns/, .../route/ and .../render/ in that order (routing reads the reported
    invocations), each on one read and one write (skills.turn_state). MCP's take_turn takes
    its turn through here; the turn call runs the same steps split around its layout
    (turn_for_session)."""
    # the report and the route on one read and one write of the session's skill state
    skills = turn_state.turn_skills(session=session, messages=messages, invoked=invoked, k=k)
    rendered = render_session(session=session, actor=actor, variables=variables)
    return Steps(reported=skills.reported, route=skills.route, rendered=rendered, session_cards=skills.session_cards)


@dataclass(frozen=True)
class Layout:
    """Step 3, pure: the per-turn text and (with a format) the provider request."""

    turn_text: str
    built: providers.ProviderRequest | None


def lay_out(
    *,
    fmt: str | None,
    content: dict[str, Any],
    prepared: Prepared,
    prefix: Any,
    tail: str,
    route: dict[str, Any],
    session_cards: list[Any],
) -> Layout:
    """The turn's text and the provider request for `fmt`; a content part the format cannot
    carry is a 400 (raised inside the turn's transaction, so the route it wrote is rolled back)."""
    text = turn_text(tail, turn_cards(content, route, session_cards))
    if fmt is None:
        return Layout(turn_text=text, built=None)
    try:
        built = provider_request(
            fmt,
            content={**content, "model": prepared.model},
            system=prefix.system,
            tools=prefix.tools,
            prefix_sha256=prefix.sha256,
            messages=prepared.compacted.messages,
            tail=tail,
            route=route,
            session_cards=session_cards,
            conversation=prepared.conversation,
        )
    except provider_input.Unfit as exc:
        raise InvalidContent("A message does not fit the format.", {exc.path: [exc.message]}) from None
    return Layout(turn_text=text, built=built)


def session_turn(
    *, session_id: Any, actor: Actor, body: Any, loaded: Loaded = UNREAD, prefetched: Prefetch | None = None
) -> dict[str, Any]:
    """The turn call: renews the lease once (404, 410 session_ended / version_revoked as every
    session call), then reports, routes, renders and compacts on that one read. `loaded`: the
    session as the fast lane read it already (sessions_app.turns); `prefetched`: the session's
    per-turn state it read with it (turns.state.prefetch)."""
    request = parse(body)
    session = session_for_turn(session_id=session_id, actor=actor, loaded=loaded)
    return turn_for_session(session=session, actor=actor, request=request, prefetched=prefetched)


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


def _answer(request: TurnRequest, prepared: Prepared, steps: Steps, layout: Layout) -> dict[str, Any]:
    route, rendered, prefix = steps.route, steps.rendered, steps.rendered.prefix
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
    retiring = catalog.retirement_notice(prepared.model)  # the model this turn names
    answer["notices"] = [*rendered.notices, retiring] if retiring else rendered.notices
    answer["skills"] = {
        "resident": route["resident"],
        "routed": route["routed"],
        "session": route["session"],
        "demoted": route["demoted"],
        "categories": route["categories"],
        **({"routing": "keywords"} if route.get("routing") == "keywords" else {}),  # docs/api.md
    }
    answer["reported"] = steps.reported
    built = layout.built
    if built is None:  # with a format the conversation is carried once, in `request` (docs/api.md)
        answer["messages"] = prepared.compacted.messages
    answer["turn_text"] = layout.turn_text
    answer["compaction"] = {key: value for key, value in prepared.compacted.as_dict().items() if key != "messages"}
    if built is not None:
        if unchanged:  # the client holds the stable part: leave it out, say how to put it back
            answer["request_reuse"] = built.reuse()
        answer["format"] = request.format
        answer["request"] = built.without_stable() if unchanged else built.body
        if built.notes:
            answer["request_notes"] = built.notes
    floor, source = catalog.cache_floor(prepared.model)
    answer["cache"] = providers.cache_report(
        system=prefix.system, tools=prefix.tools, floor=floor, source=source, prefix_sha256=prefix.sha256
    )
    return answer


def turn_for_session(
    *, session: Session, actor: Actor, request: TurnRequest, prefetched: Prefetch | None = None
) -> dict[str, Any]:
    """The turn of a session already read, checked and touched for `actor` (session_use, or a
    fast lane's own read). Everything that can refuse the request runs before the one write: a
    turn variable the pinned version refuses, messages the compaction cannot read, a report with
    no turn to report, a content part the format cannot carry leave no routed turn and no claimed
    notice. The session's per-turn state is read in one round trip (turns.state) and written in
    one statement (skills.turn_state.write); a render that has knowledge notices to claim (a
    write each) runs with that write in one transaction."""
    version = session.version
    content = content_document(version_id=version.pk, content_hash=version.content_hash)
    turn_variables(content, request.variables)  # the render checks them too; here first, before any write
    if session.bundle.strict_conversation:  # read with the session (sessions_app.selectors.pinned_row)
        guard.check_messages(request.messages)  # before anything is reported or routed
    prepared = prepare(request, content)
    names = packs_reachable(list(content.get("knowledge") or []), actor)
    state, reads = read_state(session, names, prefetched)
    planned = turn_state.plan(
        session=session, messages=for_routing(request.messages), invoked=request.invoked, k=request.k, state=state
    )
    claims = reads is not None and any(row[1] in names for row in reads[1])
    with transaction.atomic() if claims else contextlib.nullcontext():
        rendered = render_session(session=session, actor=actor, variables=request.variables, reads=reads)
        layout = lay_out(
            fmt=request.format,
            content=content,
            prepared=prepared,
            prefix=rendered.prefix,
            tail=rendered.tail,
            route=planned.skills.route,
            session_cards=planned.skills.session_cards,
        )
        skills = turn_state.write(session=session, planned=planned, turns=state.turns)
        steps = Steps(
            reported=skills.reported, route=skills.route, rendered=rendered, session_cards=skills.session_cards
        )
        answer = _answer(request, prepared, steps, layout)
        if request.usage is not None:
            observe.usage_reported(dataclasses.asdict(request.usage))
        # Counted after the commit, in memory (batched): the report adds no statement to the turn.
        evidence_services.turn_reported(
            session=session,
            number=steps.route["turn"],
            usage=request.usage,
            tools=request.tools,
            default_model=prepared.model.get("name"),
        )
    return answer
