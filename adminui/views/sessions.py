"""Session pages (the searchable list, a session, ending one through
sessions_app.services.session_end) and the drain dashboard (what is in motion, polled)."""

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_POST

from access.models import Role
from adminui import selectors
from adminui.evidence import evidence_summary
from adminui.forms import SessionSearchForm
from adminui.views.base import need_view, render, url, when
from core.errors import NotFound
from sessions_app import services as sessions_services
from sessions_app.models import Session, SessionStatus

# --- drain dashboard ------------------------------------------------------------------------


def drain_data(bundle_name: str | None) -> list[dict[str, Any]]:
    """The dashboard's rows: per bundle, its versions in motion with their labels and sessions
    (adminui.selectors.drain_versions: live, draining, and lately drained or revoked)."""
    versions = selectors.drain_versions(bundle_name)
    labels = selectors.labels_by_version()
    bundles: dict[str, list[dict[str, Any]]] = {}
    for v in versions:
        bundles.setdefault(v.bundle.name, []).append(
            {
                "number": v.number,
                "state": v.state,
                "labels": labels.get(v.pk, []),
                "active_sessions": v.active_sessions,
                "draining_since": v.draining_since.isoformat() if v.draining_since else None,
                "drained_at": v.drained_at.isoformat() if v.drained_at else None,
                "draining_since_text": when(v.draining_since),
                "drained_at_text": when(v.drained_at),
                "evidence_text": evidence_summary(v),
                "url": url("adminui_version", v.bundle.name, v.number),
                "sessions_url": url(
                    "sessions_app_session_changelist", query=f"bundle={v.bundle.name}&version={v.number}&status=active"
                ),
            }
        )
    return [{"bundle": name, "url": url("adminui_bundle", name), "versions": rows} for name, rows in bundles.items()]


def drain_dashboard(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    need_view(request, model_admin)
    bundle_name = request.GET.get("bundle") or None
    return render(
        request,
        model_admin,
        "adminui/drain.html",
        "Drain dashboard" + (f": {bundle_name}" if bundle_name else ""),
        data=drain_data(bundle_name),
        bundle_name=bundle_name or "",
        json_url=url("adminui_drain_json", query=f"bundle={bundle_name}" if bundle_name else ""),
        now=timezone.now(),
    )


def drain_tools(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """The drain dashboard's tools tab: each tool signature in motion, who still needs it and
    the expected time left (adminui.selectors.drain_tools)."""
    need_view(request, model_admin)
    rows = selectors.drain_tools()
    now = timezone.now()
    for row in rows:
        end = row["expected_end"]
        row["expected_end_text"] = when(end)
        row["time_left_text"] = _left(end - now) if end and row["state"] == "draining" else ""
        row["drained_at_text"] = when(row["drained_at"])
        row["draining_since_text"] = when(row["draining_since"])
    return render(request, model_admin, "adminui/drain_tools.html", "Drain dashboard: tools", rows=rows, now=now)


def _left(delta: Any) -> str:
    seconds = max(0, int(delta.total_seconds()))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {seconds} s"


def drain_json(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    need_view(request, model_admin)
    bundle_name = request.GET.get("bundle") or None
    return JsonResponse({"at": timezone.now().isoformat(), "bundles": drain_data(bundle_name)})


# --- sessions -------------------------------------------------------------------------------


def session_list(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    need_view(request, model_admin)
    form = SessionSearchForm(
        request.GET or None,
        bundles=selectors.bundle_names(),
        statuses=list(SessionStatus.choices),
    )
    sessions = selectors.session_search(form.cleaned_data if form.is_valid() else None)
    page_obj = Paginator(sessions, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        model_admin,
        "adminui/session_list.html",
        "Sessions",
        form=form,
        page_obj=page_obj,
        query=query.urlencode(),
    )


def _session(session_id: UUID) -> Session:
    session = selectors.session_brief(session_id)
    if session is None:
        raise NotFound(f"No session {session_id}.")
    return session


def session_detail(request: HttpRequest, model_admin: ModelAdmin, session_id: UUID) -> HttpResponse:
    actor = need_view(request, model_admin)
    session = _session(session_id)
    now = timezone.now()
    return render(
        request,
        model_admin,
        "adminui/session_detail.html",
        f"Session {session.pk}",
        session=session,
        lease_left=(session.expires_at - now) if session.status == SessionStatus.ACTIVE else None,
        lease_lapsed=session.status == SessionStatus.ACTIVE and session.expires_at <= now,
        can_end=actor.has_role(Role.OPS) and session.status == SessionStatus.ACTIVE,
    )


@require_POST
def session_end(request: HttpRequest, model_admin: ModelAdmin, session_id: UUID) -> HttpResponse:
    actor = need_view(request, model_admin)
    session = _session(session_id)
    session = sessions_services.session_end(session=session, actor=actor)  # Forbidden -> 403 page
    messages.success(request, f"Session {session.pk} is {session.status}.")
    return HttpResponseRedirect(url("adminui_session", session.pk))
