"""A tiny OpenID provider for the single sign-on tests: django-oauth-toolkit with OIDC on, in a
process of its own (tests/oidc_provider/serve.py), on its own SQLite database. Not the
registry's settings: nothing here is imported by the registry."""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ["IDP_STATE_DIR"])  # the database, the key, the claims file

SECRET_KEY = "idp-test-only-secret-key"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": STATE / "idp.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
# The registry runs on the same host (127.0.0.1, another port), and cookies do not tell ports
# apart: the provider's own names, so neither site overwrites the other's session.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"

ISSUER = os.environ["IDP_ISSUER"]
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": (STATE / "rsa.pem").read_text(),
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "email": "Email", "profile": "Profile", "groups": "Groups"},
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.ClaimsFromFile",
}
