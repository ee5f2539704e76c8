"""Single sign-on's edges without a browser: its pages while it is off, the bounds of their
parameters, a provider that cannot be reached, password sign-in switched off, the claim
filters, and the settings' refusals. The real flow: tests/access/test_sso_browser.py."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import RequestFactory

from adminui import sso

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sso_settings(settings):
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = "registry-admin"
    settings.OIDC_RP_CLIENT_SECRET = "secret"
    settings.OIDC_ROLE_CLAIM = "groups"
    settings.OIDC_ROLE_MAP = {"registry-ops": "ops", "registry-writers": "publisher"}
    settings.OIDC_ALLOWED_DOMAINS = []
    settings.OIDC_REQUIRED_CLAIMS = {}
    sso.provider_forget()
    yield settings
    sso.provider_forget()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_its_pages_are_not_found_while_it_is_not_configured(client):
    for path in ("/admin/sso/start/", "/admin/sso/callback/?code=x&state=y"):
        answer = client.get(path)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"


def test_the_login_page_offers_no_single_sign_on_while_it_is_off(client, db):
    page = client.get("/admin/login/").content.decode()
    assert 'id="id_username"' in page and "sso-start" not in page


def test_it_refuses_a_state_code_or_next_of_more_than_2000_characters(client, sso_settings):
    for query in ("code=x&state=" + "s" * 2001, "state=x&code=" + "c" * 2001):
        answer = client.get(f"/admin/sso/callback/?{query}")
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "validation_error"
    answer = client.get("/admin/sso/start/?next=/" + "n" * 2001)
    assert answer.status_code == 400
    assert answer.json()["error"]["details"] == {"next": "at most 2000 characters"}


def test_its_pages_are_rate_limited_per_client_address(client, db, sso_settings):
    cache.clear()
    sso_settings.ADMIN_LOGIN_RATE = "3/m"
    codes = [client.get("/admin/sso/callback/?code=x&state=y").status_code for _ in range(3)]
    over = client.get("/admin/sso/start/")
    assert codes == [302, 302, 302] and over.status_code == 429
    assert over.json()["error"]["code"] == "throttled" and int(over["Retry-After"]) >= 1


def test_a_callback_whose_state_this_browser_never_started_is_no_sign_in(client, db, sso_settings):
    sso_settings.OIDC_ISSUER = "http://127.0.0.1:9/o"
    sso_settings.OIDC_DISCOVERY_URL = ""
    sso_settings.OIDC_ENDPOINTS = {
        "authorization_endpoint": "http://127.0.0.1:9/auth",
        "token_endpoint": "http://127.0.0.1:9/token",
        "userinfo_endpoint": "http://127.0.0.1:9/userinfo",
        "jwks_uri": "http://127.0.0.1:9/jwks",
        "end_session_endpoint": "",
    }
    answer = client.get("/admin/sso/callback/?code=stolen&state=guessed")
    assert answer.status_code == 302 and answer["Location"] == "/admin/login/?sso=refused"
    assert "_auth_user_id" not in client.session


def test_it_answers_503_while_the_providers_discovery_document_cannot_be_read(client, sso_settings):
    sso_settings.OIDC_ISSUER = f"http://127.0.0.1:{closed_port()}/o"
    sso_settings.OIDC_DISCOVERY_URL = f"{sso_settings.OIDC_ISSUER}/.well-known/openid-configuration"
    sso_settings.OIDC_TIMEOUT = 2
    answer = client.get("/admin/sso/start/")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "unavailable"


def test_with_password_login_off_a_password_post_is_refused_before_any_password_is_checked(client, db, settings):
    settings.ADMIN_PASSWORD_LOGIN = False
    settings.SSO_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = ["adminui.sso.SsoBackend"]
    User.objects.create_superuser(username="root", password="a-long-root-password", email="")
    answer = client.post("/admin/login/", {"username": "root", "password": "a-long-root-password"})
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"
    assert "_auth_user_id" not in client.session
    # And no backend left takes a password at all.
    request = RequestFactory().post("/admin/login/")
    assert authenticate(request, username="root", password="a-long-root-password") is None


def test_the_role_claim_is_read_within_its_bounds(sso_settings):
    assert sso.roles_from_claims({"groups": ["registry-ops", "other"]}) == {"ops"}
    assert sso.roles_from_claims({"groups": "registry-writers"}) == {"publisher"}
    assert sso.roles_from_claims({"groups": {"registry-ops": True}}) == frozenset()
    assert sso.roles_from_claims({}) == frozenset()
    # Only the first SSO_GROUPS_MAX (500) entries count; the worst claim is a long list.
    assert sso.roles_from_claims({"groups": ["x"] * 500 + ["registry-ops"]}) == frozenset()
    assert sso.roles_from_claims({"groups": ["x" * 10**6] * 100_000 + ["registry-ops"]}) == frozenset()
    assert sso.roles_from_claims({"groups": [None, 3, ["registry-ops"], "registry-ops"]}) == {"ops"}


def test_the_claim_filters_refuse_what_they_should(sso_settings):
    sso_settings.OIDC_ALLOWED_DOMAINS = ["example.com"]
    assert sso.refusal({"email": "a@example.com", "email_verified": True}) is None
    assert sso.refusal({"email": "a@EXAMPLE.com", "email_verified": True}) is None
    assert "domain" in sso.refusal({"email": "a@example.com.evil.org", "email_verified": True})
    assert "domain" in sso.refusal({"email": "a@sub.example.com", "email_verified": True})
    assert "verified" in sso.refusal({"email": "a@example.com", "email_verified": False})
    assert "no email" in sso.refusal({})
    sso_settings.OIDC_ALLOWED_DOMAINS = []
    sso_settings.OIDC_REQUIRED_CLAIMS = {"email_verified": "true", "tenant": "acme"}
    assert sso.refusal({"email_verified": True, "tenant": "acme"}) is None
    assert sso.refusal({"email_verified": True, "tenant": ["other", "acme"]}) is None
    assert "tenant" in sso.refusal({"email_verified": True, "tenant": "acme-evil"})
    assert "email_verified" in sso.refusal({"email_verified": "yes", "tenant": "acme"})


def test_the_domain_rule_requires_the_email_to_be_verified(sso_settings):
    # Issue 36: an email_verified claim that is absent, a string or a number is not a verification.
    sso_settings.OIDC_ALLOWED_DOMAINS = ["example.com"]
    for claims in ({}, {"email_verified": "true"}, {"email_verified": 1}, {"email_verified": None}):
        assert "verified" in sso.refusal({"email": "a@example.com", **claims})
    assert sso.refusal({"email": "a@example.com", "email_verified": True}) is None


def settings_error(**env: str) -> str:
    """What importing the settings with this environment says (empty: nothing wrong)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OIDC_", "ADMIN_PASSWORD"))}
    environ.update({"DJANGO_SECRET_KEY": "x" * 60, "DATABASE_URL": "postgres://u@127.0.0.1:9/x", **env})
    environ["REDIS_URL"] = "redis://127.0.0.1:9/0"
    done = subprocess.run(
        [sys.executable, "-c", "import config.settings"], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    return done.stderr.strip().splitlines()[-1] if done.returncode else ""


def test_the_settings_refuse_a_configuration_that_cannot_work():
    good = {"OIDC_CLIENT_ID": "c", "OIDC_ISSUER": "https://idp.example.com", "OIDC_ROLE_MAP": "ops-team=ops"}
    assert settings_error(**good) == ""
    assert "OIDC_ROLE_MAP" in settings_error(**{**good, "OIDC_ROLE_MAP": "ops-team=root"})
    assert "OIDC_ROLE_MAP" in settings_error(**{**good, "OIDC_ROLE_MAP": ""})
    assert "OIDC_ISSUER" in settings_error(OIDC_CLIENT_ID="c", OIDC_ROLE_MAP="a=ops")
    assert "openid" in settings_error(**{**good, "OIDC_SCOPES": "email"})
    assert "OIDC_SIGN_ALGO" in settings_error(**{**good, "OIDC_SIGN_ALGO": "HS256"})
    assert "ADMIN_PASSWORD_LOGIN" in settings_error(ADMIN_PASSWORD_LOGIN="0")
    assert settings_error(**good, ADMIN_PASSWORD_LOGIN="0") == ""
    assert "OIDC_SESSION_SECONDS" in settings_error(**good, OIDC_SESSION_SECONDS="10")
    assert "OIDC_SESSION_SECONDS" in settings_error(**good, OIDC_SESSION_SECONDS=str(10**12))


def test_an_id_token_from_another_issuer_or_for_another_client_is_refused(sso_settings):
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from django.core.exceptions import SuspiciousOperation

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sso_settings.OIDC_RP_SIGN_ALGO = "RS256"
    sso._provider = {"issuer": "https://idp.example.com", "jwks_uri": "unused"}
    backend = sso.SsoBackend()
    backend.OIDC_RP_SIGN_ALGO = "RS256"
    backend.OIDC_RP_CLIENT_ID = "registry-admin"

    def token(**claims):
        base = {"iss": "https://idp.example.com", "aud": "registry-admin", "sub": "1", "exp": 2**33}
        return jwt.encode({**base, **claims}, key, algorithm="RS256")

    assert backend.get_payload_data(token(), key.public_key())["sub"] == "1"
    assert backend.get_payload_data(token(aud=["x", "registry-admin"]), key.public_key())["sub"] == "1"
    with pytest.raises(SuspiciousOperation, match="issuer"):
        backend.get_payload_data(token(iss="https://evil.example.com"), key.public_key())
    with pytest.raises(SuspiciousOperation, match="client"):
        backend.get_payload_data(token(aud="another-app"), key.public_key())
    with pytest.raises(SuspiciousOperation):  # signed by someone else
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        backend.get_payload_data(token(), other.public_key())
