"""The front door: `/` and `/api/v1/` say what is here and link to it, instead of a 404.

JSON by default (an API client, curl, a script) and a small HTML page for a browser (one
whose Accept header prefers text/html). No key needed: it lists addresses, nothing more."""

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_vary_headers

from api.errors import error_response

NAME = "Prompt registry"
DESCRIPTION = (
    "Versioned prompt bundles (system prompt, tools, guardrails, output schema) with labels, "
    "and agent sessions pinned at start to one immutable version."
)


def _collections() -> list[str]:
    """The API's top-level collections (bundles/, catalog/, sessions/...), read from its routes."""
    from api.urls import urlpatterns

    return sorted({str(p.pattern) for p in urlpatterns if "<" not in str(p.pattern) and str(p.pattern)})


def index_document(request: HttpRequest) -> dict:
    absolute = request.build_absolute_uri
    api = absolute("/api/v1/")
    return {
        "name": NAME,
        "description": DESCRIPTION,
        "links": {
            "api": api,
            "docs": absolute(reverse("docs")),
            "schema": absolute(reverse("schema")),
            "admin": absolute(reverse("admin:index")),
            "health": absolute("/healthz"),
            "ready": absolute("/readyz"),
        },
        "resources": {route.rstrip("/"): api + route for route in _collections()},
    }


def index(request: HttpRequest) -> HttpResponse:
    response: HttpResponse
    if request.method not in ("GET", "HEAD"):
        response = error_response(405, "method_not_allowed", f'Method "{request.method}" not allowed.')
        response["Allow"] = "GET, HEAD"
        return response
    document = index_document(request)
    if request.get_preferred_type(["application/json", "text/html"]) == "text/html":
        response = render(request, "site/index.html", document)
    else:
        response = JsonResponse(document, json_dumps_params={"ensure_ascii": False})
    patch_vary_headers(response, ["Accept"])
    return response


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on every page that names none (the JSON answers, say)."""
    return HttpResponsePermanentRedirect(static("adminui/favicon.svg"))
