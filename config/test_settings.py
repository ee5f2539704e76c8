"""Settings for the test suite: the real settings, a fixed key and a fast password hasher."""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DJANGO_SECURE", "0")  # the test client speaks plain HTTP
# Webhook tests deliver to receivers they start on 127.0.0.1 (the refusal is tested with it off).
os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE_URLS", "1")
# A loaded CI machine can hold a Redis reply past the production 50 ms: a test of exact rate
# limits must not see its counter skipped by a breaker that a slow reply opened. The breaker's
# own tests set the short timeout themselves.
os.environ.setdefault("REDIS_REQUEST_TIMEOUT_MS", "1000")
# faulthandler has one timer per process and pytest may use it: no watchdog unless a test asks.
os.environ.setdefault("WEB_WATCHDOG_SECONDS", "0")

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# The test runner empties tables with TRUNCATE, which the database refuses on immutable
# tables unless the connection says otherwise (registry migration 0006).
DATABASES["default"]["OPTIONS"]["options"] += " -c registry.allow_truncate=on"  # noqa: F405

# Tests flush fetch counts themselves: a background writer would race their transactions.
USAGE_FLUSH_THREAD = False

# The browser tests sign in from 127.0.0.1 more than ten times a minute; the tests of the login
# limit itself set the rate they test (tests/access/test_security.py, tests/reliability/test_breaker.py).
ADMIN_LOGIN_RATE = "1000/m"
# Many tests send unknown keys from 127.0.0.1 on purpose; the tests of the failed-auth budget and
# of the per-account login limit set the rates they test (a live server through the environment).
AUTH_FAILURE_RATE = os.environ.get("AUTH_FAILURE_RATE", "100000/m")
ADMIN_LOGIN_ACCOUNT_RATE = os.environ.get("ADMIN_LOGIN_ACCOUNT_RATE", "1000/m")

# The model catalog's clock (modelcatalog.clock) is fixed for the suite, so that a model's
# retirement date passing in the calendar cannot turn a test about something else red. The
# fixtures and examples pin no model the catalog dates, which tests/modelcatalog/
# test_catalog_sources.py checks, so they do not need it. Retirement tests set their own.
# A test's own web server (tests/live.py) may get another through its environment.
MODEL_CLOCK_NOW = os.environ.get("MODEL_CLOCK_NOW") or "2026-12-07T12:00:00+00:00"
