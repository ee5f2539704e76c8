import hashlib
import sys

from django.conf import settings
from django.contrib import admin
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from access.ratelimit import seconds_until_allowed
from adminui import sso
from api.errors import error_response, is_unavailable, unavailable_response
from api.views.index import favicon, index
from audit.context import client_ip
from config.celery import app as celery_app
from metrics.views import metrics, operator_request


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Ready when the database and the broker both answer, within about a second. What failed
    (exception class names) is shown to loopback clients and to those that send the metrics
    token only; anyone else gets the status (and the status code)."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # report, don't crash: this endpoint exists to say what is down
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"error: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    answer: dict[str, object] = {"status": "ok" if ready else "unavailable"}
    if operator_request(request):
        answer["checks"] = checks
    return JsonResponse(answer, status=200 if ready else 503)


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(404, "not_found", "Nothing exists at this address.")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    # Django answers this itself for a Host header outside ALLOWED_HOSTS, before any view.
    return error_response(400, "validation_error", "The request is not valid (check the Host header).")


def server_error(request: HttpRequest) -> JsonResponse:
    # Django calls this inside its `except` for any exception a view (or middleware) let out, so
    # sys.exc_info() is the cause: a database outage in the admin, the login or a health page is
    # a 503 like in the API, not a 500.
    if is_unavailable(sys.exc_info()[1]):
        return unavailable_response()
    return error_response(500, "internal_error", "Something went wrong on our side; it has been logged.")


def rate_limited_login(request: HttpRequest):
    """The admin login, with password guessing limited per client address and per user name
    (a guesser with many addresses), each counted before the password is checked."""
    if request.method == "POST" and not settings.ADMIN_PASSWORD_LOGIN:
        return error_response(
            403, "forbidden", "Password sign-in is switched off here: sign in through single sign-on."
        )
    if request.method == "POST":
        wait = seconds_until_allowed(
            group="admin-login", key=client_ip(request) or "", rate=settings.ADMIN_LOGIN_RATE, local_fallback=True
        )
        if wait is None:
            # The name as the login form reads it; hashed, so any text is a short Redis key.
            username = request.POST.get("username", "")[:1000].strip().lower()
            wait = seconds_until_allowed(
                group="admin-login-account",
                key=hashlib.sha256(username.encode("utf-8", "replace")).hexdigest()[:32],
                rate=settings.ADMIN_LOGIN_ACCOUNT_RATE,
                local_fallback=True,
            )
        if wait is not None:
            response = HttpResponse("Too many sign-in attempts; try again in a minute.", status=429)
            response["Retry-After"] = str(wait)
            return response
    return admin.site.login(request)


def sso_entry(view):
    """The single sign-on pages (adminui.sso) with their parameters bounded: 404 while it is not
    configured, 429 past ADMIN_LOGIN_RATE per client address (each sign-in is a start and a
    callback, and a callback calls the provider), 400 for a next, code or state over 2000
    characters, 503 while the provider's discovery document cannot be read."""

    def entry(request: HttpRequest) -> HttpResponse:
        if not settings.SSO_ENABLED:
            return error_response(404, "not_found", "Single sign-on is not configured (OIDC_CLIENT_ID).")
        wait = seconds_until_allowed(
            group="admin-sso", key=client_ip(request) or "", rate=settings.ADMIN_LOGIN_RATE, local_fallback=True
        )
        if wait is not None:
            response = error_response(429, "throttled", "Too many sign-in attempts; try again in a minute.")
            response["Retry-After"] = str(wait)
            return response
        for name in ("next", "code", "state"):
            if len(request.GET.get(name, "")) > 2000:
                return error_response(
                    400, "validation_error", f"{name} is too long.", {name: "at most 2000 characters"}
                )
        try:
            return view(request)
        except sso.ProviderUnavailable:
            return error_response(503, "unavailable", "The identity provider cannot be reached; try again shortly.")

    return entry


urlpatterns = [
    path("", index, name="index"),
    path("favicon.ico", favicon),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics),
    path("admin/login/", rate_limited_login),
    path("admin/sso/start/", sso_entry(sso.SsoStart.as_view()), name="sso_start"),
    path("admin/sso/callback/", sso_entry(sso.SsoCallback.as_view()), name="sso_callback"),
    path("admin/", admin.site.urls),
    path("api/v1/", index),
    path("api/v1/", include("api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

handler400 = bad_request
handler404 = not_found
handler500 = server_error
