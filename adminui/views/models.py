"""The retiring-models dashboard: each model that retires within the window (or retired and is
still used), the versions naming it with their labels and live sessions, and "Migrate to
replacement" per version, which derives the version on the replacement model
(registry.services.version_derive, the same service as POST .../versions/{n}/derive/) and leads
on to the version's page, where its checks, approvals and a guarded (split) move are."""

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_POST

from access.models import Role
from adminui.forms import ModelFactsForm, add_domain_error
from adminui.views.base import bundle_of, need_role, need_view, render, url
from core.errors import DomainError
from modelcatalog import clock
from modelcatalog import services as catalog_services
from modelcatalog.selectors import model_exact, model_get, model_list, parse_window, retirement_warning
from registry import derive
from registry import selectors as registry_selectors


def models_retiring(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    actor = need_view(request, model_admin)
    raw = request.GET.get("within") or f"{retirement_warning().days}d"
    try:
        within = parse_window(raw)
    except DomainError as exc:
        return render(request, model_admin, "adminui/error.html", "Not a duration", status=400, message=exc.message)
    data = registry_selectors.models_retiring_usage(within=within, actor=actor)
    return render(
        request,
        model_admin,
        "adminui/models_retiring.html",
        "Retiring models",
        models=data,
        within=raw,
        now=clock.now(),
        may_publish=actor.has_role(Role.PUBLISHER),
    )


@require_POST
def model_migrate(request: HttpRequest, model_admin: ModelAdmin, name: str, number: int) -> HttpResponse:
    """Publish version `number` again on its model's replacement; then its page."""
    actor = need_view(request, model_admin)
    need_role(actor, Role.PUBLISHER, "Migrating a version")
    bundle = bundle_of(name)
    version = registry_selectors.version_get(bundle=bundle, number=number)
    _, info = registry_selectors.version_model_info(version)
    replacement = model_get(provider=None, name=info.replacement) if info and info.replacement else None
    if info is None or replacement is None:
        messages.error(request, f"v{number} of {name} names no model with a known replacement.")
        return HttpResponseRedirect(url("adminui_models_retiring"))
    try:
        result = derive.version_derive(
            bundle=bundle,
            number=number,
            model={"name": replacement.name},
            message=f"Migrate v{number} from {info.name} (retires {info.retires_at}) to {replacement.name}",
            actor=actor,
        )
    except DomainError as exc:
        messages.error(request, f"Could not migrate v{number}: {exc.message}")
        return HttpResponseRedirect(url("adminui_models_retiring"))
    new = result.published.version
    notes = " ".join(result.notes)
    messages.success(
        request,
        f"Published v{new.number} of {name} on {replacement.name} (from v{number}). {notes} Next: its checks and "
        "approvals, then a guarded rollout (a split move) from the move page.",
    )
    return HttpResponseRedirect(url("adminui_version", name, new.number))


def model_catalog(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """The catalog with its dates and sources, and (ops) the form that corrects or extends it:
    modelcatalog.services.model_put, the same service as PUT /api/v1/models/{provider}/{name}/."""
    actor = need_view(request, model_admin)
    may_edit = actor.has_role(Role.OPS)
    status = 200
    if request.method == "POST":
        form = ModelFactsForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                catalog_services.model_put(
                    provider=data["provider"],
                    name=data["name"],
                    facts=form.facts(),
                    source={"url": data["source_url"], "read": data["source_read"].isoformat()},
                    reason=data["reason"],
                    actor=actor,
                )
            except DomainError as exc:
                add_domain_error(form, exc)
                status = exc.status
            else:
                messages.success(request, f"Updated {data['provider']}/{data['name']} in the model catalog.")
                return HttpResponseRedirect(url("adminui_models"))
        else:
            status = 400
    else:
        wanted = model_exact(provider=request.GET.get("provider", ""), name=request.GET.get("name", ""))
        initial = {"provider": wanted.provider, "name": wanted.name} if wanted else {}
        form = ModelFactsForm(initial=initial)
    return render(
        request,
        model_admin,
        "adminui/models.html",
        "Model catalog",
        status=status,
        models=[m.as_dict() for m in model_list()],
        form=form if may_edit else None,
    )
