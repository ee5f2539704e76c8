"""Single sign-on to the admin through an OpenID Connect provider, on mozilla-django-oidc.

The flow is the library's: /admin/sso/start/ sends the browser to the provider's authorization
endpoint with a state, a nonce and a PKCE challenge (S256); /admin/sso/callback/ exchanges the
code (with the verifier) for tokens, checks the ID token's signature against the provider's
keys, its nonce, and here also its issuer and audience (the library checks neither), then reads
the userinfo. What is ours: the provider's endpoints from its discovery document (fetched once
per process, on the first sign-in, never at start or per request), who may sign in at all
(allowed email domains, required claims, a role), the roles from a claim through OIDC_ROLE_MAP
at every sign-in (access.services.sso_sign_in), and a logout that ends the provider's session
where it has an end_session_endpoint."""

import logging
import threading
from typing import Any
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from access.services import SsoRefused, sso_sign_in
from core import limits

log = logging.getLogger(__name__)

# Where the library's settings name an endpoint, and the discovery document's field for it.
_SETTING_OF_ENDPOINT = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_REQUIRED = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or is not usable."""


_lock = threading.Lock()
_provider: dict[str, str] | None = None


def provider() -> dict[str, str]:
    """The provider's issuer and endpoints: the discovery document's, each overridden by an
    OIDC_*_ENDPOINT setting. Fetched once per process (a failure is not kept, so the next
    sign-in tries again); the issuer it names must be OIDC_ISSUER when that is set."""
    global _provider
    with _lock:
        if _provider is not None:
            return _provider
        found: dict[str, str] = {"issuer": settings.OIDC_ISSUER}
        if settings.OIDC_DISCOVERY_URL:
            try:
                response = requests.get(settings.OIDC_DISCOVERY_URL, timeout=settings.OIDC_TIMEOUT)
                response.raise_for_status()
                document = response.json()
            except (requests.RequestException, ValueError) as exc:
                raise ProviderUnavailable(f"discovery document {settings.OIDC_DISCOVERY_URL}: {exc}") from exc
            if not isinstance(document, dict):
                raise ProviderUnavailable("the discovery document is not a JSON object")
            issuer = document.get("issuer")
            if not isinstance(issuer, str) or (settings.OIDC_ISSUER and issuer != settings.OIDC_ISSUER):
                raise ProviderUnavailable(f"the discovery document names the issuer {issuer!r}, not OIDC_ISSUER")
            found["issuer"] = issuer
            for key in (*_REQUIRED, "end_session_endpoint"):
                if isinstance(document.get(key), str):
                    found[key] = document[key]
        found.update({k: v for k, v in settings.OIDC_ENDPOINTS.items() if v})
        missing = [k for k in _REQUIRED if not found.get(k)]
        if missing:
            raise ProviderUnavailable(f"the provider names no {', '.join(missing)}")
        _provider = found
        return found


def provider_forget() -> None:
    """Read the discovery document again at the next sign-in (tests; a provider that moved)."""
    global _provider
    with _lock:
        _provider = None


def _setting(attr: str, *default: Any) -> Any:
    if attr in _SETTING_OF_ENDPOINT:
        return provider()[_SETTING_OF_ENDPOINT[attr]]
    if attr == "OIDC_TIMEOUT":
        return settings.OIDC_TIMEOUT
    return getattr(settings, attr, *default)


def _text(value: Any, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


def roles_from_claims(claims: dict[str, Any]) -> frozenset[str]:
    """The roles OIDC_ROLE_MAP gives for the groups in the OIDC_ROLE_CLAIM claim (a list of
    names, or one name). At most SSO_GROUPS_MAX entries are read; longer names are ignored."""
    raw = claims.get(settings.OIDC_ROLE_CLAIM)
    groups = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    names = {g for g in groups[: limits.SSO_GROUPS_MAX] if isinstance(g, str) and len(g) <= limits.SSO_GROUP_MAX}
    return frozenset(settings.OIDC_ROLE_MAP[g] for g in names if g in settings.OIDC_ROLE_MAP)


def refusal(claims: dict[str, Any]) -> str | None:
    """Why the person these claims describe may not sign in at all (None: they may): an email
    outside OIDC_ALLOWED_DOMAINS (or one the provider does not say, with `email_verified`
    true, that it has verified: an absent claim is not a verification), or a claim of
    OIDC_REQUIRED_CLAIMS without its value."""
    if settings.OIDC_ALLOWED_DOMAINS:
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            return "no email claim, and OIDC_ALLOWED_DOMAINS is set"
        # Only a literal true counts: a provider that leaves the claim out (or sends "true" as a
        # string, or 1) has not told us that the address belongs to the person signing in.
        if claims.get("email_verified") is not True:
            return "the provider has not verified the email address"
        if email.rpartition("@")[2].lower() not in settings.OIDC_ALLOWED_DOMAINS:
            return "the email's domain is not in OIDC_ALLOWED_DOMAINS"
    for name, wanted in settings.OIDC_REQUIRED_CLAIMS.items():
        value = claims.get(name)
        values = value if isinstance(value, list) else [value]
        if wanted not in ["true" if v is True else "false" if v is False else str(v) for v in values]:
            return f"the claim {name!r} is not {wanted!r}"
    return None


class SsoBackend(OIDCAuthenticationBackend):
    """Signs in the person the provider's code stands for (the callback's authenticate call
    only: a password sign-in is ModelBackend's, or nobody's when it is switched off)."""

    get_settings = staticmethod(_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django makes a backend for every request that carries a session: no endpoint lookup
        # here (the library's __init__ reads them all); authenticate() reads them when needed.
        from django.contrib.auth import get_user_model

        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or "nonce" not in kwargs:  # only the callback view passes a nonce
            return None
        try:
            endpoints = provider()
        except ProviderUnavailable as exc:
            log.warning("single sign-on: the provider is unavailable: %s", exc)
            return None
        self.OIDC_OP_TOKEN_ENDPOINT = endpoints["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = endpoints["userinfo_endpoint"]
        self.OIDC_OP_JWKS_ENDPOINT = endpoints["jwks_uri"]
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            log.warning("single sign-on: a call to the provider failed: %s", exc)
            return None

    def get_payload_data(self, token: Any, key: Any) -> Any:
        # The library checks the signature and the expiry, not who issued the token nor for whom.
        payload = super().get_payload_data(token, key)
        if payload.get("iss") != provider()["issuer"]:
            raise SuspiciousOperation("The ID token's issuer is not the provider's.")
        audience = payload.get("aud")
        if settings.OIDC_RP_CLIENT_ID not in (audience if isinstance(audience, list) else [audience]):
            raise SuspiciousOperation("The ID token is not meant for this client.")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: the userinfo's sub must be the ID token's.
            raise SuspiciousOperation("The userinfo's subject is not the ID token's.")
        # The ID token's claims, then the userinfo's (some providers send groups in one only).
        claims = {**payload, **userinfo}
        issuer = _text(payload.get("iss"), limits.SSO_ISSUER_MAX + 1)
        subject = _text(payload.get("sub"), limits.SSO_SUBJECT_MAX + 1)
        username = _text(claims.get(settings.OIDC_USERNAME_CLAIM), limits.SSO_USERNAME_MAX + 1)
        who = username or subject or "?"
        if not subject or len(subject) > limits.SSO_SUBJECT_MAX or len(issuer) > limits.SSO_ISSUER_MAX:
            raise SuspiciousOperation("The ID token's issuer or subject is missing or too long.")
        if not username or len(username) > limits.SSO_USERNAME_MAX:
            log.warning("single sign-on refused: the %s claim is missing or too long", settings.OIDC_USERNAME_CLAIM)
            return None
        reason = refusal(claims)
        if reason:
            log.warning("single sign-on refused for %s: %s", who, reason)
            return None
        roles = roles_from_claims(claims)
        try:
            user = sso_sign_in(
                issuer=issuer,
                subject=subject,
                username=username,
                email=_text(claims.get("email"), limits.SSO_EMAIL_MAX),
                first_name=_text(claims.get("given_name"), 150),
                last_name=_text(claims.get("family_name"), 150),
                roles=roles,
            )
        except SsoRefused as exc:
            log.warning("single sign-on refused for %s: %s", who, exc)
            return None
        if not roles:
            log.warning("single sign-on refused for %s: no role (the claim names no group in OIDC_ROLE_MAP)", who)
            return None
        log.info("single sign-on: %s signed in with %s", who, ", ".join(sorted(roles)))
        return user


class SsoStart(OIDCAuthenticationRequestView):
    """GET /admin/sso/start/?next=...: off to the provider (state, nonce, PKCE challenge).
    Raises ProviderUnavailable (config.urls answers 503)."""

    get_settings = staticmethod(_setting)

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the endpoints are read in dispatch, not at every construction

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.OIDC_OP_AUTH_ENDPOINT = provider()["authorization_endpoint"]
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        response: HttpResponse = super().dispatch(request, *args, **kwargs)
        return response


class SsoCallback(OIDCAuthenticationCallbackView):
    """GET /admin/sso/callback/?code=...&state=...: where the provider sends the browser back;
    a sign-in that fails or is refused lands on the login page (LOGIN_REDIRECT_URL_FAILURE)."""

    get_settings = staticmethod(_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        # The library raises for a state this browser never started and for an ID token that
        # fails a check (issuer, audience, signature, nonce): to the person, a refused sign-in.
        try:
            response: HttpResponse = super().get(request)
        except SuspiciousOperation as exc:
            log.warning("single sign-on refused: %s", exc)
            return self.login_failure()
        return response

    def login_success(self) -> HttpResponse:
        # Where to go and the ID token (the provider's logout needs it), read before auth.login:
        # signing in over another person's session flushes the session, and both with it.
        target = self.success_url
        id_token = self.request.session.get("oidc_id_token")
        super().login_success()
        self.request.session.set_expiry(settings.OIDC_SESSION_SECONDS)
        if id_token:
            self.request.session["oidc_id_token"] = id_token
        return HttpResponseRedirect(target)


def logout_redirect(request: HttpRequest) -> str | None:
    """Where the browser goes to end its session at the provider too: the end_session_endpoint
    (RP-initiated logout) with the ID token as hint and the login page to come back to. None: the
    person did not sign in through the provider, or it has no such endpoint."""
    id_token = request.session.get("oidc_id_token")
    if not settings.SSO_ENABLED or not id_token:
        return None
    try:
        endpoint = provider().get("end_session_endpoint")
    except ProviderUnavailable:
        return None
    if not endpoint:
        return None
    back = request.build_absolute_uri(reverse("admin:login"))
    query = urlencode(
        {"id_token_hint": id_token, "post_logout_redirect_uri": back, "client_id": settings.OIDC_RP_CLIENT_ID}
    )
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def logout(request: HttpRequest) -> HttpResponse | None:
    """End the admin session and, where the provider supports it, the provider's; None when the
    provider's logout does not apply (the admin's own logout page follows)."""
    target = logout_redirect(request)
    if target is None:
        return None
    auth.logout(request)
    return HttpResponseRedirect(target)


__all__ = ["ProviderUnavailable", "SsoBackend", "SsoCallback", "SsoStart", "logout", "provider", "provider_forget"]
