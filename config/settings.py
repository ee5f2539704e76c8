"""Settings, read once from the environment through small typed helpers that fail loudly.

DATABASE_URL and REDIS_URL are required here; `make run` / `make test` (devtools.stack)
start embedded PostgreSQL and Redis and set them when they are not given.
"""

import ipaddress
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import logsetup
from core import limits
from core.redis_client import redis_tls_options
from evals import endpoints as eval_endpoints

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"Set the environment variable {name}.")
    return value


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}.") from None


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean, got {raw!r}.")


DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEV_SECRET_KEY if DEBUG else None)
if SECRET_KEY == DEV_SECRET_KEY and not DEBUG:
    raise ImproperlyConfigured("Refusing to start with the development secret key: set DJANGO_SECRET_KEY.")
ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

# Deployment hardening, on unless DJANGO_SECURE=0 (which `make run` and the tests set: they
# serve plain HTTP on loopback). These settings pass `manage.py check --deploy`.
SECURE = env_bool("DJANGO_SECURE", not DEBUG)
if SECURE and len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY is too short for production: use 50 or more random characters.")
SECURE_SSL_REDIRECT = SECURE
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # probes speak plain HTTP inside the network
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31536000) if SECURE else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
BEHIND_PROXY = env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    # Only behind a proxy that sets X-Forwarded-Proto itself; otherwise clients could forge it.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many proxies in front append to X-Forwarded-For; the client address (audit log, login
# limit) is the entry that many hops from the right. 0: REMOTE_ADDR.
TRUSTED_PROXY_HOPS = env_int("DJANGO_TRUSTED_PROXY_HOPS", 1 if BEHIND_PROXY else 0)


def _networks(name: str, raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    try:
        return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in raw.split(",") if p.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be comma-separated addresses or CIDR ranges: {exc}") from None


# The peers whose X-Forwarded-For is read (addresses or CIDR ranges): a request from any other
# peer is its own REMOTE_ADDR whatever it sends, so a client that reaches the app directly
# cannot claim loopback (/metrics, /readyz) or a fresh address per request (login and auth
# limits). Default: loopback only (a proxy on the same host).
TRUSTED_PROXIES = _networks("DJANGO_TRUSTED_PROXIES", env_str("DJANGO_TRUSTED_PROXIES", "127.0.0.0/8,::1/128"))
CSRF_TRUSTED_ORIGINS = [o for o in env_str("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

INSTALLED_APPS = [
    "adminui.admin_app.RegistryAdminConfig",  # django.contrib.admin with the registry's site (who may sign in)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "simple_history",
    "access",
    "audit",
    "registry",
    "modelcatalog",
    "sessions_app",
    "skills",
    "knowledge",
    "api",
    "adminui",
    "webhooks",
    "metrics",
    "retention",
    "evals",
    "evidence",
]

MIDDLEWARE = [
    "metrics.middleware.RequestMetricsMiddleware",  # outermost: times everything below it
    "audit.context.RequestContextMiddleware",
    "api.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "simple_history.middleware.HistoryRequestMiddleware",
]

ROOT_URLCONF = "config.urls"
# The contract's paths end in "/" exactly as written: no HTML redirect (which loses POST bodies).
APPEND_SLASH = False
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    # Persistent connections: the pinned-bundle fetch is the hot path and must not pay a
    # connection set-up per request.
    "default": dj_database_url.parse(
        env_str("DATABASE_URL"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
        conn_health_checks=env_bool("DB_CONN_HEALTH_CHECKS", True),
    )
}
# Bounded work: no statement runs longer than this (a runaway query is cancelled, not queued behind).
DB_STATEMENT_TIMEOUT_MS = env_int("DB_STATEMENT_TIMEOUT_MS", 15000)
DATABASES["default"].setdefault("OPTIONS", {})["options"] = f"-c statement_timeout={DB_STATEMENT_TIMEOUT_MS}"
# A failover must cost seconds, not minutes (docs/reliability.md): every process that uses the
# database (web, worker, beat, commands) gives up on a server that is gone or does not answer.
# libpq's defaults wait 130 s for a connection (psycopg's stand-in for "none") and for ever
# for a result. connect_timeout bounds a new connection (libpq's minimum is 2 s); keepalives
# find an idle connection whose peer vanished; tcp_user_timeout fails one whose sent data goes
# unacknowledged (a dead host); config.postgres (its base module) checks, on any wait longer than
# DB_STALL_CHECK_MS, that the server still answers (a frozen one acknowledges every byte).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["ENGINE"] = "config.postgres"
DATABASES["default"]["OPTIONS"].update(
    {
        "connect_timeout": env_int("DB_CONNECT_TIMEOUT", 2),
        "keepalives": 1,
        "keepalives_idle": env_int("DB_KEEPALIVES_IDLE", 5),
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": env_int("DB_TCP_USER_TIMEOUT_MS", 5000),
    }
)
_stall_ms = env_int("DB_STALL_CHECK_MS", 1000)
DATABASES["default"]["WATCH"] = {  # type: ignore[typeddict-unknown-key]  # read by config.postgres
    "stall_check": _stall_ms / 1000 if _stall_ms > 0 else None,
}
# Django binds parameters on the client (no prepared statements); the fast lane's batched
# read uses its own server-side-binding cursor on the same connection and asks psycopg to
# prepare it, which needs a threshold (Django leaves it None: never prepare). Behind a pooler
# in transaction mode that cannot carry prepared statements, set DB_PREPARED_STATEMENTS=0.
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5 if env_bool("DB_PREPARED_STATEMENTS", True) else None
# `manage.py migrate` (registry/management/commands/migrate.py) runs with these: a migration
# waits at most MIGRATION_LOCK_TIMEOUT_MS for a lock (while it waits, every session's query on
# that table queues behind it), is retried MIGRATION_LOCK_RETRIES times, and no statement of it
# runs (holding its lock) longer than MIGRATION_STATEMENT_TIMEOUT_MS. See docs/operations.md.
MIGRATION_LOCK_TIMEOUT_MS = env_int("MIGRATION_LOCK_TIMEOUT_MS", 1000)
MIGRATION_STATEMENT_TIMEOUT_MS = env_int("MIGRATION_STATEMENT_TIMEOUT_MS", 5000)
MIGRATION_LOCK_RETRIES = env_int("MIGRATION_LOCK_RETRIES", 10)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every Redis URL (REDIS_URL, BUNDLE_CACHE_URL, CELERY_BROKER_URL) may carry a password
# (redis://:PASSWORD@host:6379/0), an ACL user (redis://USER:PASSWORD@host...) and TLS
# (rediss://, the certificate verified against REDIS_TLS_CA_FILE or else the system's CAs).
REDIS_URL = env_str("REDIS_URL")
REDIS_TLS_CA_FILE = env_str("REDIS_TLS_CA_FILE", "")


# Where registry.bundle_cache keeps canonical content bytes (by content hash).
BUNDLE_CACHE_URL = env_str("BUNDLE_CACHE_URL", REDIS_URL)
# Socket timeouts of the Redis calls made while serving a request (rate limits, the bytes cache,
# enqueueing a task). A hung Redis costs a request at most this, once per process and breaker
# cooldown (core.breaker); a healthy one answers in well under a millisecond.
REDIS_REQUEST_TIMEOUT_MS = env_int("REDIS_REQUEST_TIMEOUT_MS", 50)
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "registry",
        # Short timeouts: the cache is an accelerator, never a reason for a request to hang.
        "OPTIONS": {
            "socket_connect_timeout": 0.25,
            "socket_timeout": 0.25,
            **redis_tls_options(REDIS_URL, REDIS_TLS_CA_FILE),
        },
    }
}

# Single sign-on to the admin through an OpenID Connect provider (adminui/sso.py, docs/operations.md):
# on when OIDC_CLIENT_ID is set. The provider's endpoints come from its discovery document
# (OIDC_DISCOVERY_URL, or OIDC_ISSUER + /.well-known/openid-configuration), fetched when the
# first person signs in; each OIDC_*_ENDPOINT given overrides the document's.
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", "")
SSO_ENABLED = bool(OIDC_RP_CLIENT_ID)
OIDC_ISSUER = env_str("OIDC_ISSUER", "")
OIDC_DISCOVERY_URL = env_str("OIDC_DISCOVERY_URL", "")
if not OIDC_DISCOVERY_URL and OIDC_ISSUER:
    OIDC_DISCOVERY_URL = OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration"
OIDC_ENDPOINTS = {
    "authorization_endpoint": env_str("OIDC_AUTHORIZATION_ENDPOINT", ""),
    "token_endpoint": env_str("OIDC_TOKEN_ENDPOINT", ""),
    "userinfo_endpoint": env_str("OIDC_USERINFO_ENDPOINT", ""),
    "jwks_uri": env_str("OIDC_JWKS_URI", ""),
    "end_session_endpoint": env_str("OIDC_END_SESSION_ENDPOINT", ""),
}
if SSO_ENABLED and not OIDC_DISCOVERY_URL:
    _missing = [
        k
        for k in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")
        if not OIDC_ENDPOINTS[k]
    ]
    if _missing or not OIDC_ISSUER:
        raise ImproperlyConfigured(
            "OIDC_CLIENT_ID is set: set OIDC_ISSUER (or OIDC_DISCOVERY_URL), or OIDC_ISSUER and every one of "
            "OIDC_AUTHORIZATION_ENDPOINT, OIDC_TOKEN_ENDPOINT, OIDC_USERINFO_ENDPOINT and OIDC_JWKS_URI."
        )
OIDC_RP_SCOPES = env_str("OIDC_SCOPES", "openid email profile")
if SSO_ENABLED and "openid" not in OIDC_RP_SCOPES.split():
    raise ImproperlyConfigured(f"OIDC_SCOPES must include openid, got {OIDC_RP_SCOPES!r}.")
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
if OIDC_RP_SIGN_ALGO not in {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}:
    raise ImproperlyConfigured(
        f"OIDC_SIGN_ALGO must be an asymmetric JWS algorithm (RS256, ES256, ...), got {OIDC_RP_SIGN_ALGO!r}."
    )
# Seconds any one call to the provider (discovery, token, userinfo, keys) may take.
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT", 10)
# The claim that carries a person's groups at the provider, and which of those groups give which
# role here ("registry-admins=admin,registry-ops=ops,prompt-writers=publisher"): publisher is the
# group Prompt engineers, ops the group Ops, admin a superuser. Read again at every sign-in.
OIDC_ROLE_CLAIM = env_str("OIDC_ROLE_CLAIM", "groups")
OIDC_ROLE_MAP: dict[str, str] = {}
for _pair in (p.strip() for p in env_str("OIDC_ROLE_MAP", "").split(",")):
    if not _pair:
        continue
    _group, _, _role = _pair.rpartition("=")
    if not _group.strip() or _role.strip() not in {"publisher", "ops", "admin"}:
        raise ImproperlyConfigured(
            f"OIDC_ROLE_MAP: each entry is <provider group>=<publisher|ops|admin>, got {_pair!r}."
        )
    OIDC_ROLE_MAP[_group.strip()] = _role.strip()
if SSO_ENABLED and not OIDC_ROLE_MAP:
    raise ImproperlyConfigured("OIDC_CLIENT_ID is set: set OIDC_ROLE_MAP (which provider groups give which role).")
# The claim whose value is the account's user name here (what authorship records: user:<name>).
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "email")
# Who may sign in at all: email domains (empty: any), and claims that must hold a value
# ("email_verified=true,hd=example.com"; a list claim must contain it).
OIDC_ALLOWED_DOMAINS = [d.strip().lower() for d in env_str("OIDC_ALLOWED_DOMAINS", "").split(",") if d.strip()]
OIDC_REQUIRED_CLAIMS: dict[str, str] = {}
for _pair in (p.strip() for p in env_str("OIDC_REQUIRED_CLAIMS", "").split(",")):
    if _pair:
        _claim, _eq, _value = _pair.partition("=")
        if not _eq or not _claim.strip():
            raise ImproperlyConfigured(f"OIDC_REQUIRED_CLAIMS: each entry is <claim>=<value>, got {_pair!r}.")
        OIDC_REQUIRED_CLAIMS[_claim.strip()] = _value.strip()
# How long an admin session opened through the provider lasts (then the person signs in again,
# and their roles are read again from the claim); password sessions keep Django's two weeks.
OIDC_SESSION_SECONDS = env_int("OIDC_SESSION_SECONDS", 8 * 3600)
if not 300 <= OIDC_SESSION_SECONDS <= 30 * 86400:
    raise ImproperlyConfigured(f"OIDC_SESSION_SECONDS must be 300 to 2592000, got {OIDC_SESSION_SECONDS}.")
# mozilla-django-oidc's own settings, fixed: PKCE (S256) and a nonce on every sign-in, the ID token
# kept in the session for the provider's logout, our callback and where sign-ins end up.
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True
OIDC_AUTHENTICATION_CALLBACK_URL = "sso_callback"
LOGIN_REDIRECT_URL = "/admin/"
LOGIN_REDIRECT_URL_FAILURE = "/admin/login/?sso=refused"
# Local password sign-in to the admin; off (with single sign-on on) the login page offers only
# the provider, password POSTs are refused, and sessions opened with a password end.
ADMIN_PASSWORD_LOGIN = env_bool("ADMIN_PASSWORD_LOGIN", True)
if not ADMIN_PASSWORD_LOGIN and not SSO_ENABLED:
    raise ImproperlyConfigured("ADMIN_PASSWORD_LOGIN=0 needs single sign-on: set OIDC_CLIENT_ID (docs/operations.md).")
AUTHENTICATION_BACKENDS = (["adminui.sso.SsoBackend"] if SSO_ENABLED else []) + (
    ["django.contrib.auth.backends.ModelBackend"] if ADMIN_PASSWORD_LOGIN else []
)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# config/formats/en: ISO dates with the time zone everywhere (the locale default is "Dec. 1, 2026, 9:15 p.m.").
FORMAT_MODULE_PATH = ["config.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Request bodies over 2 MiB are refused with 413 by api.middleware before anything reads them.
MAX_REQUEST_BODY_BYTES = limits.REQUEST_BODY_MAX_BYTES
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES
# The ASGI front (config.asgi): a client has WEB_BODY_TIMEOUT seconds to deliver its whole body
# (then 408), read on the event loop, so a slow client never holds one of the WEB_THREADS threads
# per worker process that run Django and the fast lane (each keeps one database connection).
WEB_BODY_TIMEOUT = env_int("WEB_BODY_TIMEOUT", 10)
WEB_THREADS = env_int("WEB_THREADS", 8)
# A web worker whose event loop does not come round for this many seconds exits (edge.watchdog)
# and granian starts another; 0 turns the watchdog off.
WEB_WATCHDOG_SECONDS = env_int("WEB_WATCHDOG_SECONDS", 10)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.RolePermission"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.SafeJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "api.negotiation.JsonAlways",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.KeyRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "api.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "api.pagination.Cursor",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
}

# Per-key request budgets ("6000/m", "100/s", "10/5m"; empty disables), see access.ratelimit. Reads
# include the pinned-bundle fetch, which agents call every turn.
API_THROTTLE_RATES = {
    "read": env_str("API_THROTTLE_READ", "6000/m"),
    "write": env_str("API_THROTTLE_WRITE", "600/m"),
}
ADMIN_LOGIN_RATE = env_str("ADMIN_LOGIN_RATE", "10/m")  # POSTs to the admin login, per client address
# POSTs to the admin login per user name, whatever address they come from (a guesser with many
# addresses); a sign-in over it is refused without checking the password.
ADMIN_LOGIN_ACCOUNT_RATE = env_str("ADMIN_LOGIN_ACCOUNT_RATE", "20/10m")
# Requests per client address whose API key is not a working key (unknown, expired, revoked);
# past it those get 429 instead of 401. A working key is never refused by it.
AUTH_FAILURE_RATE = env_str("AUTH_FAILURE_RATE", "60/m")
# The model's file tools (ls, glob, grep, read) one key may have running at once, across every
# web process (counted in Redis; per process while Redis is away); a slot whose holder died
# lapses after FILE_TOOL_SLOT_SECONDS.
FILE_TOOL_CONCURRENCY = env_int("FILE_TOOL_CONCURRENCY", 4)
FILE_TOOL_SLOT_SECONDS = env_int("FILE_TOOL_SLOT_SECONDS", 30)
# Turn calls (POST /sessions/{id}/turn/) one key may have running at once, across every web
# process, counted as the file tools are. A turn costs a few tens of milliseconds, so at the
# default write budget (10/s) a key averages well under one running turn; 4 leaves a burst
# room and keeps one key from holding more than 4 of the web threads with costly turns.
TURN_CONCURRENCY = env_int("TURN_CONCURRENCY", 4)
TURN_SLOT_SECONDS = env_int("TURN_SLOT_SECONDS", 30)
# The routing indexes one web process keeps (skills.router.index_for), by their estimated size
# (skills.router.index_bytes), least recently used first out. An index of the evaluation set's
# 62 cards is about 1.5 MB, one of 100 cards of 300 Chinese characters each about 17 MB.
SKILL_INDEX_CACHE_BYTES = env_int("SKILL_INDEX_CACHE_BYTES", 256 * 1024 * 1024)
# Costlier skill indexes (registry.skills_content.index_build_cost) are built by the worker,
# keywords meanwhile (skills.index_store); this much is about 0.2 s of CPU in a web process.
SKILL_INDEX_INLINE_COST = env_int("SKILL_INDEX_INLINE_COST", 12_000)
# The beat's sweep of big labelled versions with no index in Redis: period, builds per run at most.
SKILL_INDEX_SWEEP_INTERVAL = env_int("SKILL_INDEX_SWEEP_INTERVAL", 300)
SKILL_INDEX_SWEEP_MAX = env_int("SKILL_INDEX_SWEEP_MAX", 10)


SPECTACULAR_SETTINGS = {
    "TITLE": "Prompt registry API",
    "DESCRIPTION": "Versioned prompt bundles, labels and sessions pinned at start.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's files are served from this package, not a CDN: the docs page works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "api.schema.add_error_responses"],
}

# Celery: Redis broker. Tasks take ids and re-read the database, so results are not stored.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_BROKER_USE_SSL = redis_tls_options(CELERY_BROKER_URL, REDIS_TLS_CA_FILE) or None
# kombu's Redis transport with one fix: a worker that loses Redis while a task is unacknowledged
# reconnects instead of stopping (config/broker.py). Named only for Redis URLs; with a transport
# named, TLS comes from CELERY_BROKER_USE_SSL (always set for rediss://), not from the scheme.
CELERY_BROKER_TRANSPORT = "config.broker:Transport" if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
# A task whose pool child died (kill -9, out of memory) goes back to the queue at once instead of
# being acknowledged as failed. Safe because every task is idempotent.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Two queues, each with its own worker (make run, compose, Kubernetes): `lifecycle` runs the
# session sweep, drains and every other periodic lifecycle task (the default queue, so a new
# task lands there unless routed); `deliveries` runs webhook attempts and their retry sweep, so
# a slow receiver can take every delivery slot without delaying an expiry or a drain.
LIFECYCLE_QUEUE = "lifecycle"
DELIVERIES_QUEUE = "deliveries"
CELERY_TASK_DEFAULT_QUEUE = LIFECYCLE_QUEUE
# Skill routing's semantic path (docs/skills.md): an OpenAI-compatible embeddings endpoint
# (POST {url}/v1/embeddings) for a team's own model; unset, the offline models (WordLlama's wheel
# and skills/models/e5-static.npz) are used, and they stay the fallback when the endpoint fails.
SKILLS_EMBEDDING_URL = env_str("SKILLS_EMBEDDING_URL", "")
SKILLS_EMBEDDING_MODEL = env_str("SKILLS_EMBEDDING_MODEL", "")
SKILLS_EMBEDDING_KEY = env_str("SKILLS_EMBEDDING_KEY", "")
SKILLS_EMBEDDING_TIMEOUT_MS = env_int("SKILLS_EMBEDDING_TIMEOUT_MS", 2000)
if SKILLS_EMBEDDING_URL and not SKILLS_EMBEDDING_MODEL:
    raise ImproperlyConfigured(
        "SKILLS_EMBEDDING_URL needs SKILLS_EMBEDDING_MODEL (the model name the endpoint expects)."
    )
if SKILLS_EMBEDDING_MODEL and not SKILLS_EMBEDDING_URL:
    raise ImproperlyConfigured(
        f"SKILLS_EMBEDDING_MODEL needs SKILLS_EMBEDDING_URL: no model runs in the worker's process "
        f"(the in-process multilingual-e5-small was removed); serve {SKILLS_EMBEDDING_MODEL!r} behind "
        "an OpenAI-compatible /v1/embeddings and set SKILLS_EMBEDDING_URL."
    )
if not 50 <= SKILLS_EMBEDDING_TIMEOUT_MS <= 30_000:
    raise ImproperlyConfigured("SKILLS_EMBEDDING_TIMEOUT_MS must be between 50 and 30000.")

CELERY_TASK_ROUTES = {
    "webhooks.tasks.*": {"queue": DELIVERIES_QUEUE},
    "retention.tasks.*": {"queue": LIFECYCLE_QUEUE},  # the daily prune
    # Outbound HTTP to MCP servers (up to WEBHOOK_ATTEMPT_DEADLINE each): with the deliveries,
    # never in the way of a drain.
    "registry.tasks.mcp_drift_task": {"queue": DELIVERIES_QUEUE},
    "api.tasks.eval_job_task": {"queue": DELIVERIES_QUEUE},  # evaluation runs: outbound calls too
}
# The worker's and beat's broker connection. Requests enqueue through config.celery.enqueue
# instead, with the short request-path timeouts and the Redis breaker. max_retries/interval_*
# bound kombu's reconnect loop (its default retries for seconds).
CELERY_BROKER_CONNECTION_TIMEOUT = 1.0
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 0.5,
    "socket_timeout": 2,
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.1,
    "interval_max": 0.2,
    # A message delivered to a worker that dies before acknowledging it (kill -9 of the worker's
    # main process) waits in Redis's unacked set; any live worker puts it back on the queue once
    # it is this many seconds old, checking every second (kombu's default check runs every
    # 10 x 10 s). So after a crash the task runs within about 4 s of a worker being back, not
    # at the next sweep (the goal is 5 s; a pool child killed while its job was still in the
    # pipe from the main process takes this path too, measured at 5.6 s with 5 here).
    # The cost: a message held longer than this is delivered twice: a task running that long,
    # one waiting in a prefetch slot (at most one per process here) or one held for its ETA.
    # Our tasks take milliseconds and are idempotent; the only ETAs are autoretry backoffs of a
    # few seconds (a duplicate is harmless), and webhook retries are scheduled by their database
    # sweep, not by ETA. Do not add long-ETA tasks without raising this.
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3),
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
SESSION_SWEEP_INTERVAL = env_int("SESSION_SWEEP_INTERVAL", 60)
# Active sessions shown exactly up to this many per version or label target; above it, the
# count the last sweep made (sessions_app.models.active_count; docs/performance.md).
SESSION_COUNT_EXACT_LIMIT = env_int("SESSION_COUNT_EXACT_LIMIT", 1000)
if not 10 <= SESSION_COUNT_EXACT_LIMIT <= 1_000_000:
    raise ImproperlyConfigured("SESSION_COUNT_EXACT_LIMIT must be between 10 and 1000000.")
# The model catalog (modelcatalog, docs/operations.md#when-a-model-retires): a model counts as
# retiring this many days before its date (moves to it need allow_retiring; the turn call says
# so); each process keeps the merged catalog this many seconds; MODEL_CLOCK_NOW (ISO 8601) fixes
# the catalog's clock, for tests and rehearsals (modelcatalog.clock).
MODEL_RETIREMENT_WARNING = timedelta(days=env_int("MODEL_RETIREMENT_WARNING_DAYS", 30))
MODEL_CATALOG_CACHE_SECONDS = env_int("MODEL_CATALOG_CACHE_SECONDS", 30)
MODEL_CLOCK_NOW = env_str("MODEL_CLOCK_NOW", "") or None
# The model providers the registry itself calls, its daily budget and call time-out (evals/endpoints.py).
EVAL_PROVIDERS, EVAL_DAILY_BUDGET_USD, EVAL_CALL_TIMEOUT = eval_endpoints.from_environment(os.environ)
# How long a change request (a move or release waiting for required approvals) stays pending.
CHANGE_TTL_HOURS = env_int("CHANGE_TTL_HOURS", 24)
CELERY_BEAT_SCHEDULE = {
    "sessions-sweep": {"task": "sessions_app.tasks.sweep_task", "schedule": float(SESSION_SWEEP_INTERVAL)},
    "webhooks-retry-sweep": {
        "task": "webhooks.tasks.webhook_retry_sweep_task",
        "schedule": float(env_int("WEBHOOK_RETRY_SWEEP_INTERVAL", 5)),
    },
    # Pending change requests past their expiry (registry.changes.change_expire_sweep).
    "changes-expire-sweep": {"task": "registry.tasks.change_expire_sweep_task", "schedule": 300.0},
    # Model retirement notices (modelcatalog.services.retirement_notices_send): hourly.
    "models-retirement-sweep": {
        "task": "modelcatalog.tasks.model_retirement_sweep_task",
        "schedule": float(env_int("MODEL_RETIREMENT_SWEEP_INTERVAL", 3600)),
    },
    # The MCP drift check (registry.mcp_drift): every declared server of the live versions listed again.
    "mcp-drift-check": {
        "task": "registry.tasks.mcp_drift_task",
        "schedule": float(env_int("MCP_DRIFT_INTERVAL", 300)),
    },
    # Guarded rollouts (evidence.rollouts): every watching guard judged, a lifecycle task.
    "rollout-guard": {
        "task": "evidence.tasks.rollout_guard_task",
        "schedule": float(env_int("ROLLOUT_GUARD_INTERVAL", 60)),
    },
    "evals-jobs-sweep": {"task": "api.tasks.eval_jobs_sweep_task", "schedule": 60.0},  # evals.jobs.jobs_sweep
    # Big versions some label targets whose skill index is not in Redis (skills.index_store.sweep).
    "skill-index-sweep": {"task": "skills.tasks.skill_index_sweep_task", "schedule": float(SKILL_INDEX_SWEEP_INTERVAL)},
    # Retention (retention.services.prune): once a day by default, a lifecycle task.
    "retention-prune": {
        "task": "retention.tasks.prune_task",
        "schedule": float(env_int("PRUNE_INTERVAL", 86400)),
    },
}
# Retention in days (docs/operations.md, retention.services): ended and expired sessions; their
# skill turns and L3 cards; their file reads and change notices (both capped at the sessions'
# retention); finished webhook deliveries; per-day usage rollups; audit events (at least 30:
# the audit trigger refuses to delete anything younger). Versions, labels, their history and
# each version's lifetime counts are never pruned.
RETENTION_SESSIONS_DAYS = env_int("RETENTION_SESSIONS_DAYS", 30)
RETENTION_TURNS_DAYS = env_int("RETENTION_TURNS_DAYS", 30)
RETENTION_FILE_READS_DAYS = env_int("RETENTION_FILE_READS_DAYS", 30)
RETENTION_DELIVERIES_DAYS = env_int("RETENTION_DELIVERIES_DAYS", 30)
RETENTION_USAGE_ROLLUP_DAYS = env_int("RETENTION_USAGE_ROLLUP_DAYS", 365)
RETENTION_AUDIT_DAYS = env_int("RETENTION_AUDIT_DAYS", 365)
# The connection the audit prune deletes through (a role in registry_audit_pruner, audit
# migration 0005). Only the prune's own process gets it; web and workers must not.
AUDIT_PRUNE_DATABASE_URL = env_str("AUDIT_PRUNE_DATABASE_URL", "")
# Rows per prune batch to start with (the size then adapts so that a batch takes 20-50 ms).
PRUNE_BATCH = env_int("PRUNE_BATCH", 200)
# Webhook deliveries (webhooks/services.py, docs/operations.md): the wall-clock deadline of one
# whole attempt (resolve, connect, TLS, send, status line and headers), how many attempts one
# endpoint may have in flight at once (the rest wait, due, until a slot is free), and how long a
# delivery sent to the queue counts as queued (the retry sweep does not send it again meanwhile;
# after that it assumes the message was lost, e.g. with a Redis that restarted empty).
WEBHOOK_ATTEMPT_DEADLINE = env_int("WEBHOOK_ATTEMPT_DEADLINE", 10)
WEBHOOK_ENDPOINT_CONCURRENCY = env_int("WEBHOOK_ENDPOINT_CONCURRENCY", 2)
WEBHOOK_QUEUE_LEASE = env_int("WEBHOOK_QUEUE_LEASE", 300)
# Webhook signing secrets are stored encrypted (Fernet) with these keys (comma-separated, each
# from `Fernet.generate_key()`): the first encrypts, every one decrypts, so a new key goes
# first and the old ones stay until `manage.py webhook_secrets_reseal` has run. Unset: one key
# derived from DJANGO_SECRET_KEY (rotating that key then needs WEBHOOK_SECRET_KEYS set to the
# old derived key first: see docs/operations.md).
WEBHOOK_SECRET_KEYS = [key.strip() for key in env_str("WEBHOOK_SECRET_KEYS", "").split(",") if key.strip()]
# Webhook endpoints and declared MCP servers may not point at loopback, link-local or private
# addresses unless this is on (tests, internal deployments): see core.urlcheck.
WEBHOOK_ALLOW_PRIVATE_URLS = env_bool("WEBHOOK_ALLOW_PRIVATE_URLS", False)
# /metrics: scrapes send this as a Bearer token; unset, only loopback clients are answered.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# Evidence (evidence/, docs/api.md#evidence): how long after its session ended a score is
# accepted, and model prices (USD per million tokens) that override evidence.pricing's table:
# {"model": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}.
EVIDENCE_SCORE_WINDOW_DAYS = env_int("EVIDENCE_SCORE_WINDOW_DAYS", 7)
# Each web process adds its fetch counts to the database from a background thread (metrics.usage).
USAGE_FLUSH_THREAD = True

# Leases: the default TTL and the fraction of it after which a fetch writes a renewal.
SESSION_DEFAULT_TTL = limits.TTL_DEFAULT_SECONDS
SESSION_MAX_TTL = limits.TTL_MAX_SECONDS
SESSION_RENEW_FRACTION = 0.25

# LOG_FORMAT: "plain" (the default, as `make run` shows it) or "json", one object per line with
# the request id, key prefix, session, trace and task where known (config.logformat).
LOG_FORMAT = env_str("LOG_FORMAT", "plain").lower()
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}.")
# The access log (metrics.access): one line per request from every HTTP lane; on by default in
# the JSON format, ACCESS_LOG=0 turns it off (ACCESS_LOG=1 writes it in the plain format too).
ACCESS_LOG = env_bool("ACCESS_LOG", LOG_FORMAT == "json")
LOGGING = logsetup.logging_config(LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))
