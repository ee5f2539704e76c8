"""The playground page of a bundle: pick a version (or the draft the new-version form sent),
type a user message, see the turn the registry composes for it and, with a provider configured,
the model's answer; the conversation goes on in the page's session (adminui.playground)."""

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from access.actors import Actor, actor_for_user
from access.models import Role
from adminui import playground, suite_forms
from adminui.views.base import bundle_of, need_role, need_view, render, url, version_choices, version_of
from adminui.workbench import MAX_PREVIEW_JSON, draft_of
from core.errors import DomainError, InvalidContent, NotFound
from evals import content as suite_content
from evals import selectors, services
from evals.jobs import provider_get
from knowledge.templatetags.knowledge_admin import example_variables
from registry.models import Bundle, BundleVersion
from turns import providers as formats
from turns.preview import Draft


def _key(bundle: Bundle) -> str:
    return f"adminui:playground:{bundle.name}"


def draft_keep(request: HttpRequest, bundle: Bundle, draft: Draft) -> str:
    """Keep a draft for the playground (the new-version form's "Try in the playground"); the
    conversation starts again on it. Returns the playground's address."""
    request.session[_key(bundle)] = {"subject": playground.DRAFT, "draft": draft.content, "turns": []}
    return url("adminui_playground", bundle.name)


def _json(text: str, name: str) -> Any:
    if len(text) > MAX_PREVIEW_JSON:
        raise InvalidContent("Too long.", {name: [f"At most {MAX_PREVIEW_JSON} characters."]})
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as exc:
        raise InvalidContent("Not JSON.", {name: [str(exc)]}) from None


def _subject(actor: Actor, bundle: Bundle, state: dict[str, Any], chosen: str) -> BundleVersion | Draft:
    if chosen == playground.DRAFT:
        if not state.get("draft"):
            raise InvalidContent("No draft here.", {"subject": ["Send one from the new-version form."]})
        return draft_of(bundle=bundle, content=state["draft"], actor=actor)
    return version_of(bundle, chosen)


def _send(request: HttpRequest, bundle: Bundle, state: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    """One turn from the posted form; the page's answer (the composed request, or the problem)."""
    actor = actor_for_user(request.user)  # one groups query per request
    subject = _subject(actor, bundle, state, form["subject"])
    if subject_changed(state, form["subject"]):
        state["turns"] = []
    state["subject"] = form["subject"]
    provider = provider_get(form["provider"]) if form["provider"] else None
    if provider is not None:
        need_role(actor, Role.PUBLISHER, "Calling a model")
    sent = playground.send(
        subject=subject,
        caller=playground.Caller(actor=actor, bundle_name=bundle.name),
        provider=provider,
        fmt=form["format"],
        session_variables=_json(form["variables"], "variables") or {},
        turn_variables=_json(form["turn_variables"], "turn_variables"),
        turns=state.get("turns", []),
        message=form["message"],
        typed_reply=form["assistant"] if provider is None else "",
        beside=(form["beside"], _subject(actor, bundle, state, form["beside"])) if form["beside"] else None,
    )
    state.setdefault("turns", []).append(sent.turn)
    return {"preview": sent.preview}


def _latest_items(suite: Any) -> list[dict[str, Any]]:
    """The items of the suite's latest version (the one a saved case extends); none without one."""
    try:
        return suite_content.stored(selectors.suite_version_get(suite=suite).canonical)["items"]
    except NotFound:
        return []


def _save_case(request: HttpRequest, bundle: Bundle, state: dict[str, Any], form: dict[str, str]) -> HttpResponse:
    """ "Save as a suite case": the conversation as a new case of a suite's next version (the
    latest version's items, then this one), through evals.services.suite_version_publish, the
    service POST /api/v1/suites/{name}/versions/ calls (its validation, its role check)."""
    back = url("adminui_playground", bundle.name, query=f"subject={form['subject']}")
    post = request.POST
    try:
        suite = selectors.suite_get(name=post.get("suite", ""))
        items = _latest_items(suite)
        row = dict.fromkeys(suite_forms.ROW_FIELDS, "")
        row.update(scorer=post.get("scorer", ""), value=post.get("value", ""))
        item = playground.as_case(
            turns=state.get("turns", []),
            session_variables=_json(form["variables"], "variables"),
            case_id=post.get("case", "").strip(),
            expect=suite_forms.scorer_of(row),
        )
        result = services.suite_version_publish(
            suite=suite,
            content_doc={"items": [*items, item]},
            message=f"case {item['id']} from the playground ({bundle.name})",
            actor=actor_for_user(request.user),
        )
    except (DomainError, ValueError) as exc:
        said = getattr(exc, "message", None) or str(exc)
        details = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in (getattr(exc, "details", None) or {}).items())
        messages.error(request, f"Not saved: {said} {details}".strip())
        return HttpResponseRedirect(back)
    messages.success(request, f"Saved the conversation as case {item['id']} of {suite.name} v{result.version.number}.")
    return HttpResponseRedirect(back)


def subject_changed(state: dict[str, Any], chosen: str) -> bool:
    return bool(state.get("subject")) and state.get("subject") != chosen


def playground_page(request: HttpRequest, model_admin: ModelAdmin, name: str) -> HttpResponse:
    actor = need_view(request, model_admin)
    bundle = bundle_of(name)
    state: dict[str, Any] = request.session.get(_key(bundle)) or {"turns": []}
    latest = version_choices(bundle, exclude_revoked=True)
    configured = playground.providers()
    form = {
        "subject": request.POST.get("subject") or request.GET.get("subject") or state.get("subject") or "",
        "provider": request.POST.get("provider", configured[0]["name"] if configured else ""),
        "format": request.POST.get("format", formats.FORMATS[0]),
        "variables": request.POST.get("variables", state.get("variables", "")),
        "turn_variables": request.POST.get("turn_variables", "{}"),
        "message": "",
        "assistant": "",
        "beside": request.POST.get("beside", ""),
    }
    if not form["subject"] and latest:
        form["subject"] = str(latest[0][0])
    answer: dict[str, Any] = {}
    status = 200
    if request.method == "POST" and "reset" in request.POST:
        request.session[_key(bundle)] = {**state, "turns": []}
        return HttpResponseRedirect(url("adminui_playground", bundle.name, query=f"subject={form['subject']}"))
    if request.method == "POST" and "save" in request.POST:
        return _save_case(request, bundle, state, form)
    if request.method == "POST":
        form.update(message=request.POST.get("message", ""), assistant=request.POST.get("assistant", ""))
        try:
            answer = _send(request, bundle, state, form)
            form["message"] = form["assistant"] = ""
        except DomainError as exc:
            details = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in (exc.details or {}).items())
            answer = {"error": f"{exc.message} {details}".strip()}
            status = exc.status
        state["variables"] = form["variables"]
        request.session[_key(bundle)] = state
    if not form["variables"]:
        form["variables"] = _example(bundle, form["subject"], state)
    return render(
        request,
        model_admin,
        "adminui/playground.html",
        f"Playground: {bundle.name}",
        status=status,
        crumb="Playground",
        bundle=bundle,
        form=form,
        subjects=[(str(n), text) for n, text in latest],
        has_draft=bool(state.get("draft")),
        providers=configured,
        formats=formats.FORMATS,
        turns=state.get("turns", []),
        answer=answer,
        may_call=actor.has_role(Role.PUBLISHER),
        suites=[s.name for s in selectors.suites_all()],
        kinds=suite_forms.KINDS,
        budget=settings.EVAL_DAILY_BUDGET_USD,
    )


def _example(bundle: Bundle, chosen: str, state: dict[str, Any]) -> str:
    """Example session variables for the chosen version's declarations (the provider request's)."""
    try:
        if chosen == playground.DRAFT:
            declared = (state.get("draft") or {}).get("variables") or {}
        else:
            declared = json.loads(bytes(version_of(bundle, chosen).canonical)).get("variables") or {}
    except DomainError:
        return "{}"
    return json.dumps(example_variables(declared), indent=2, ensure_ascii=False)
