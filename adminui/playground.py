"""The playground (docs/admin.md#the-playground): a conversation on a version or a draft, each turn
composed by adminui.workbench.compose_turn (the one composition the admin has, the version
page's provider request too) and, when the operator configured providers (EVAL_PROVIDERS), sent
to the model with the provider's official SDK (evals.provider_calls, the module the worker's
runs and the CLI use), its reply, tokens, cached tokens, cost and latency kept in the page's
session so the conversation goes on. Calls are priced by the model catalog (evidence.pricing),
held against the day's EVAL_DAILY_BUDGET_USD (evals.jobs), as the worker's runs are, and each
is audited (`playground.called`: who, the version or draft hash, provider, model, tokens, cost)."""

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings

from access.actors import Actor
from adminui.workbench import ProviderPreview, compose_turn
from core.errors import InvalidContent
from evals import jobs
from evals.endpoints import Provider
from evals.provider_calls import CALLERS, with_model
from evidence.pricing import input_output
from registry.models import BundleVersion
from turns.preview import MAX_PREVIEW_MESSAGE, Draft

MAX_TURNS = 20  # turns kept in one page session
DRAFT = "draft"


@dataclass(frozen=True)
class Sent:
    preview: ProviderPreview
    turn: dict[str, Any]  # what the conversation keeps: user, assistant, tool_calls, usage, cost_usd, ...


def providers() -> list[dict[str, Any]]:
    """The configured providers as the page may show them (never a key)."""
    configured: dict[str, Provider] = settings.EVAL_PROVIDERS
    return [p.public() for p in configured.values()]


def messages_of(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation so far in the neutral shape: each turn's user message and the reply (its
    text; a reply that only called tools is written as the calls it made)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        out.append({"role": "user", "content": turn["user"]})
        said = turn.get("assistant") or "; ".join(
            f"[called {c.get('name')} {c.get('arguments')}]" for c in turn.get("tool_calls") or []
        )
        if said:
            out.append({"role": "assistant", "content": said})
    return out


def route_kept(preview: ProviderPreview, reply: dict[str, Any] | None) -> dict[str, Any]:
    """What the conversation keeps of a turn's route for the next turns' (a session's skill turn
    row): the names routed and, when the model answered, the names it called, which is what an
    adapter reports as `invoked` with the next turn call. No answer (none asked, or an error):
    not reported, so the ghost rule takes it as no evidence, as for a session's unreported turn."""
    answered = reply is not None and reply.get("assistant") is not None
    invoked = [c.get("name") for c in (reply or {}).get("tool_calls") or []] if answered else None
    return {"routed": [r["name"] for r in preview.route["routed"]], "invoked": invoked}


def routes_of(turns: list[dict[str, Any]], beside: str | None = None) -> list[dict[str, Any] | None]:
    """The earlier turns' routes, oldest first, on the conversation's version (or, `beside`, on
    the version shown beside under that name; a turn that had none there: None, not known)."""
    if beside is None:
        return [turn.get("route") for turn in turns]
    return [
        (t.get("beside") or {}).get("route") if (t.get("beside") or {}).get("name") == beside else None for t in turns
    ]


def _model(preview: ProviderPreview, provider: Provider) -> str:
    name = provider.model or preview.body.get("model") or preview.body.get("modelId")
    if not isinstance(name, str) or not name:
        raise InvalidContent("No model to call.", {"provider": ["The content names no model and the provider none."]})
    return name


@dataclass(frozen=True)
class Caller:
    """Who calls and on what, for the audit log: the person, the bundle's name."""

    actor: Actor
    bundle_name: str


def _answer(
    preview: ProviderPreview, provider: Provider, caller: Caller, subject: BundleVersion | Draft
) -> dict[str, Any]:
    """Send the composed request with the provider's SDK: the reply and its figures, or the
    provider's error. Priced, counted against the day's budget (refused when spent) and
    audited, answered or not (evals.jobs.playground_call_record)."""
    model = _model(preview, provider)
    prices = jobs.require_price(model, input_output(model))
    jobs.require_budget()
    request = with_model(provider.format, preview.body, provider.model)
    record = partial(
        jobs.playground_call_record,
        actor=caller.actor,
        bundle_name=caller.bundle_name,
        version_number=subject.number if isinstance(subject, BundleVersion) else None,
        content_hash=subject.content_hash,
        provider=provider,
        model=model,
    )
    began = time.monotonic()
    try:
        reply = CALLERS[provider.format](
            request, provider.base_url, float(settings.EVAL_CALL_TIMEOUT), provider.api_key()
        )
    except Exception as exc:  # noqa: BLE001 - the provider's error is the answer shown
        record(error=type(exc).__name__, usage=None, cost=0.0)
        return {"assistant": None, "error": f"{type(exc).__name__}: {exc}"[:1000]}
    cost = jobs.cost_of(prices, reply["usage"])
    record(error="", usage=reply["usage"], cost=cost)
    return {
        "assistant": reply["text"][:MAX_PREVIEW_MESSAGE],
        "tool_calls": reply["tool_calls"][:20],
        "usage": reply["usage"],
        "cost_usd": round(cost, 6),
        "latency_ms": int((time.monotonic() - began) * 1000),
        "model": model,
        "provider": provider.name,
    }


def send(
    *,
    subject: BundleVersion | Draft,
    caller: Caller,
    provider: Provider | None,
    fmt: str,
    session_variables: Any,
    turn_variables: Any,
    turns: list[dict[str, Any]],
    message: str,
    typed_reply: str = "",
    beside: tuple[str, BundleVersion | Draft] | None = None,
) -> Sent:
    """Compose the next turn (and, with a provider, send it). InvalidContent for what the turn
    call would refuse, a model without a price; BudgetSpent once the day's budget is spent. A
    provider's own error is the turn's `error`, shown, and the conversation keeps the message.
    `beside` (a name and another version or the draft): the same conversation is also composed
    and sent there, its answer shown beside this one (the conversation goes on with this one)."""
    if not message.strip() or len(message) > MAX_PREVIEW_MESSAGE:
        raise InvalidContent("Type a message.", {"message": [f"1 to {MAX_PREVIEW_MESSAGE} characters."]})
    if len(turns) >= MAX_TURNS:
        raise InvalidContent("The conversation is long enough.", {"message": [f"At most {MAX_TURNS} turns: reset."]})
    messages = [*messages_of(turns), {"role": "user", "content": message}]
    composed = {
        "fmt": provider.format if provider else fmt,
        "session_variables": session_variables,
        "turn_variables": turn_variables,
        "messages": messages,
    }
    # Each turn routes on the earlier turns' routes, as a session's turn call does.
    preview = compose_turn(subject=subject, earlier=routes_of(turns), **composed)
    turn: dict[str, Any] = {"user": message, "assistant": typed_reply[:MAX_PREVIEW_MESSAGE] or None}
    if provider is None:
        return Sent(preview, {**turn, "route": route_kept(preview, None)})
    turn.update(_answer(preview, provider, caller, subject))
    turn["route"] = route_kept(preview, turn)
    if beside is not None:
        other = compose_turn(subject=beside[1], earlier=routes_of(turns, beside[0]), **composed)
        answer = _answer(other, provider, caller, beside[1])
        turn["beside"] = {"name": beside[0], **answer, "route": route_kept(other, answer)}
    return Sent(preview, turn)


def as_case(*, turns: list[dict[str, Any]], session_variables: Any, case_id: str, expect: dict[str, Any]) -> Any:
    """The conversation as a suite item: its messages up to the last user message (the reply to
    that one is what the case will judge), the session variables, and one expectation."""
    if not turns:
        raise InvalidContent("Nothing to save yet.", {"case": ["Send a message first."]})
    messages = [*messages_of(turns[:-1]), {"role": "user", "content": turns[-1]["user"]}]
    given: dict[str, Any] = {"messages": messages}
    if session_variables:
        given["variables"] = session_variables
    return {"id": case_id, "input": given, "expect": [expect], "tags": ["playground"]}
