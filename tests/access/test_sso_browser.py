"""Single sign-on to the admin, end to end: headless Chromium against pytest-django's live
server and a real OpenID provider (django-oauth-toolkit, tests/oidc_provider/) started here in
a process of its own on 127.0.0.1, with its own SQLite database and an RSA key made at start.
The authorization-code flow with PKCE runs for real: the browser signs in at the provider, the
registry exchanges the code at the provider's token endpoint and checks the ID token against
its published keys. A person's claims are in the provider's claims.json, which the tests
rewrite to move them between groups."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Playwright's sync API runs an event loop in this thread (see tests/adminui/test_adminui_browser.py).
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

import pytest  # noqa: E402
from django.apps import apps  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from playwright.sync_api import Page, expect  # noqa: E402

from access.groups import OPS, PROMPT_ENGINEERS  # noqa: E402
from access.models import SsoIdentity  # noqa: E402
from adminui import sso  # noqa: E402
from adminui.groups import groups_sync  # noqa: E402
from audit.models import AuditEvent  # noqa: E402
from devtools.stack import free_port  # noqa: E402
from tests.adminui import test_adminui_browser as browser_tests  # noqa: E402
from tests.adminui.test_adminui_browser import PASSWORD, Shots  # noqa: E402

# The browser, its page, the live server's address and the screenshots, as the admin's browser tests have them.
browser, page, base_url, shot = browser_tests.browser, browser_tests.page, browser_tests.base_url, browser_tests.shot

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID, CLIENT_SECRET = "registry-admin", "registry-client-secret-for-tests"
ROLE_MAP = {"registry-admins": "admin", "registry-ops": "ops", "registry-writers": "publisher"}


class Provider:
    """The test OpenID provider's process and its claims file."""

    def __init__(self, state: Path, registry_url: str) -> None:
        self.state = state
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}/o"
        self.claims: dict[str, dict[str, Any]] = {}
        self.output: list[str] = []
        (state / "clients.json").write_text(
            json.dumps(
                [
                    {
                        "client_id": CLIENT_ID,
                        "client_secret": CLIENT_SECRET,
                        "redirect_uri": f"{registry_url}/admin/sso/callback/",
                        "post_logout_redirect_uri": f"{registry_url}/admin/login/",
                    }
                ]
            )
        )
        for name, email in (
            ("alice", "alice@example.com"),
            ("bob", "bob@elsewhere.org"),
            ("carol", "carol@example.com"),
        ):
            self.claims[name] = {"email": email, "email_verified": True, "groups": []}
        self.save()

    def set_groups(self, name: str, groups: list[str]) -> None:
        self.claims[name]["groups"] = groups
        self.save()

    def save(self) -> None:
        (self.state / "claims.json").write_text(json.dumps(self.claims))

    def start(self) -> None:
        env = {**os.environ, "IDP_STATE_DIR": str(self.state), "IDP_ISSUER": self.issuer}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider.serve", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        proc = self.proc
        threading.Thread(target=lambda: self.output.extend(proc.stdout or []), daemon=True).start()
        began = time.monotonic()
        while time.monotonic() - began < 60:
            if proc.poll() is not None:
                pytest.fail("the OpenID provider exited:\n" + "".join(self.output[-40:]))
            try:
                with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        pytest.fail("the OpenID provider did not answer:\n" + "".join(self.output[-40:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            self.proc.wait(20)


@pytest.fixture(scope="module")
def provider(live_server, tmp_path_factory) -> Iterator[Provider]:
    idp = Provider(tmp_path_factory.mktemp("idp"), live_server.url.replace("localhost", "127.0.0.1"))
    idp.start()
    yield idp
    idp.stop()


@pytest.fixture
def sso_on(settings, provider: Provider, transactional_db) -> Provider:
    """The registry configured for the provider as docs/operations.md says, by the settings the
    environment would give (OIDC_ISSUER, OIDC_CLIENT_ID, ...)."""
    groups_sync(apps=apps)  # earlier transactional tests flush the groups the migration made
    for name in provider.claims:
        provider.set_groups(name, [])
    settings.SSO_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_DISCOVERY_URL = f"{provider.issuer}/.well-known/openid-configuration"
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.OIDC_ROLE_MAP = ROLE_MAP
    settings.OIDC_ALLOWED_DOMAINS = ["example.com"]
    settings.AUTHENTICATION_BACKENDS = ["adminui.sso.SsoBackend", "django.contrib.auth.backends.ModelBackend"]
    sso.provider_forget()
    yield provider
    sso.provider_forget()


def sign_in(page: Page, base_url: str, name: str, *, at_provider: bool = True) -> None:
    """From the admin's login page through the provider and back. `at_provider`: the provider
    asks for the password (no session there yet)."""
    page.goto(f"{base_url}/admin/login/?next=/admin/registry/bundle/")
    page.click("#sso-start")
    if at_provider:
        expect(page.locator("h1")).to_have_text("Test identity provider")
        page.fill("#idp-username", name)
        page.fill("#idp-password", "idp-password")
        page.click("#idp-submit")
    page.wait_for_url(f"{base_url}/admin/**")
    page.wait_for_load_state()


def sign_out(page: Page, base_url: str) -> None:
    page.click("#logout-form button")
    # Through the provider's end_session_endpoint and back to the admin's login page.
    page.wait_for_url(f"{base_url}/admin/login/")


def test_it_signs_in_through_the_provider_with_the_role_its_claim_gives_and_takes_it_away_at_the_next_sign_in(
    page: Page, base_url: str, sso_on: Provider, shot: Shots
):
    sso_on.set_groups("alice", ["registry-ops", "somewhere-else"])
    page.goto(f"{base_url}/admin/login/")
    expect(page.locator("#sso-start")).to_be_visible()
    expect(page.locator("#id_username")).to_be_visible()  # password sign-in is still on
    shot(page, "login-page")

    sign_in(page, base_url, "alice")
    expect(page.locator(".adminui-role")).to_have_text("role: ops")
    shot(page, "signed-in-as-ops")
    alice = User.objects.get(username="alice@example.com")
    assert alice.email == "alice@example.com"
    assert set(alice.groups.values_list("name", flat=True)) == {OPS}
    assert not alice.has_usable_password()
    identity = SsoIdentity.objects.get(user=alice)
    assert (identity.issuer, identity.roles) == (sso_on.issuer, ["ops"])
    assert AuditEvent.objects.filter(action="user.sso_created", target="alice@example.com").count() == 1

    # Logging out ends the provider's session too: the next sign-in asks for the password again.
    sign_out(page, base_url)
    sso_on.set_groups("alice", ["registry-writers"])
    sign_in(page, base_url, "alice", at_provider=True)
    expect(page.locator(".adminui-role")).to_have_text("role: publisher")
    assert set(alice.groups.values_list("name", flat=True)) == {PROMPT_ENGINEERS}
    assert User.objects.filter(email="alice@example.com").count() == 1  # the same account
    sign_out(page, base_url)

    sso_on.set_groups("alice", ["registry-admins"])
    sign_in(page, base_url, "alice")
    expect(page.locator(".adminui-role")).to_have_text("role: admin")
    alice.refresh_from_db()
    assert alice.is_superuser and alice.is_staff
    # The session lasts OIDC_SESSION_SECONDS, not Django's two weeks; the account's page says
    # where its roles come from.
    key = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")
    assert SessionStore(session_key=key).get_expiry_age() == 8 * 3600
    page.goto(f"{base_url}/admin/auth/user/{alice.pk}/change/")
    expect(page.locator("fieldset", has_text="Single sign-on")).to_contain_text(
        f"subject {identity.subject} at {sso_on.issuer}; roles at the last sign-in: admin"
    )
    shot(page, "account-page")
    sign_out(page, base_url)

    # Out of every group at the provider: the next sign-in is refused and no role is left.
    sso_on.set_groups("alice", ["somewhere-else"])
    sign_in(page, base_url, "alice")
    expect(page.locator("#sso-refused")).to_be_visible()
    shot(page, "refused-without-role")
    alice.refresh_from_db()
    assert not alice.is_superuser and not alice.is_staff
    assert alice.groups.count() == 0
    changes = AuditEvent.objects.filter(action="user.sso_roles", target="alice@example.com").order_by("id")
    assert [e.data["roles"] for e in changes] == [["ops"], ["publisher"], ["admin"], []]
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(f"{base_url}/admin/login/?next=/admin/")


def test_it_refuses_a_person_outside_the_allowed_domains_and_creates_no_account(
    page: Page, base_url: str, sso_on: Provider, shot: Shots
):
    sso_on.set_groups("bob", ["registry-ops"])  # the right group, the wrong domain
    sign_in(page, base_url, "bob")
    expect(page.locator("#sso-refused")).to_be_visible()
    shot(page, "refused-domain")
    assert not User.objects.filter(username="bob@elsewhere.org").exists()
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(f"{base_url}/admin/login/?next=/admin/")


def test_it_never_takes_over_a_local_account_of_the_same_name(page: Page, base_url: str, sso_on: Provider):
    User.objects.create_user(username="carol@example.com", password=PASSWORD, email="carol@example.com")
    sso_on.set_groups("carol", ["registry-admins"])
    sign_in(page, base_url, "carol")
    expect(page.locator("#sso-refused")).to_be_visible()
    carol = User.objects.get(username="carol@example.com")
    assert not carol.is_superuser and not SsoIdentity.objects.filter(user=carol).exists()


def test_with_password_login_off_only_single_sign_on_lets_anyone_in(
    page: Page, base_url: str, sso_on: Provider, settings, shot: Shots
):
    settings.AUTHENTICATION_BACKENDS = ["adminui.sso.SsoBackend", "django.contrib.auth.backends.ModelBackend"]
    User.objects.create_user(username="local-ops", password=PASSWORD, is_staff=True, is_superuser=True)
    page.goto(f"{base_url}/admin/login/?next=/admin/registry/bundle/")
    page.fill("#id_username", "local-ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Bundles")
    settings.ADMIN_PASSWORD_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = ["adminui.sso.SsoBackend"]

    page.goto(f"{base_url}/admin/login/")
    expect(page.locator("#sso-start")).to_be_visible()
    expect(page.locator("#id_username")).to_have_count(0)
    shot(page, "login-page-sso-only")
    # (The refusal of a password POST itself: tests/access/test_sso.py.) A session opened with a password
    # before the switch is over too: Django no longer knows its backend.
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(f"{base_url}/admin/login/?next=/admin/")

    sso_on.set_groups("alice", ["registry-ops"])
    sign_in(page, base_url, "alice")
    expect(page.locator(".adminui-role")).to_have_text("role: ops")
