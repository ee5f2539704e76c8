"""The provider request of one turn, from what the render, the route and the compaction gave:
the skill cards the model reads this turn, the per-turn text (the render's tail, then those
cards) and the body `turns.providers.build_request` lays out. Called by turns.compose's
`lay_out`, which the turn call, MCP's take_turn and the admin's preview all go through."""

from typing import Any

from registry.skills_content import render_card
from turns import providers

SKILLS_HEADER = "Skills for this turn:"


def turn_cards(content: dict[str, Any], route: dict[str, Any], session_cards: list[Any]) -> list[str]:
    """The cards of this turn's skills as the model reads them: resident (L1), routed (L2), then
    the session's own (L3), each as registry.skills_content.render_card renders a card."""
    by_name = {s["name"]: s for s in content.get("skills") or []}
    names = [*route["resident"], *[r["name"] for r in route["routed"]]]
    cards = [render_card(by_name[name]) for name in names if name in by_name]
    order = {name: i for i, name in enumerate(route["session"])}
    for card in sorted((c for c in session_cards if c.name in order), key=lambda c: order[c.name]):
        cards.append(render_card({"name": card.name, "summary": card.summary, "description": card.description}))
    return cards


def turn_text(tail: str, cards: list[str]) -> str:
    """The per-turn text after the conversation: the render's tail, then the skill cards."""
    if not cards:
        return tail
    return f"{tail}\n\n{SKILLS_HEADER}\n\n" + "\n".join(cards)


def provider_request(
    fmt: str,
    *,
    content: dict[str, Any],
    system: str,
    tools: list[dict[str, Any]],
    prefix_sha256: str,
    messages: list[dict[str, Any]],
    tail: str,
    route: dict[str, Any],
    session_cards: list[Any],
    conversation: list[dict[str, Any]] | None = None,
) -> providers.ProviderRequest:
    """The body for `fmt`: the prefix (system, tools, its hash), the pinned model settings and
    output schema, the compacted `messages` (or `conversation`, the same already in `fmt`'s own
    shape: turns.provider_input.write), then the per-turn text."""
    return providers.build_request(
        fmt,
        providers.TurnParts(
            system=system,
            tools=tools,
            prefix_sha256=prefix_sha256,
            model=content.get("model") or {},
            output_schema=content.get("output_schema"),
            messages=messages,
            turn_text=turn_text(tail, turn_cards(content, route, session_cards)),
            conversation=conversation,
        ),
    )
