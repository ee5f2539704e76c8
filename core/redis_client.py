"""One long-lived redis-py client per process and URL, for the paths that run on every
request (the bytes cache, rate limits). Django's cache API builds a new client object on every
call, which costs more than the Redis round trip itself. redis-py's pool is fork-safe."""

import functools
import ssl
from typing import Any

import redis
from django.conf import settings


def redis_tls_options(url: str, ca_file: str) -> dict[str, Any]:
    """What a rediss:// URL needs besides itself: a verified certificate (kombu, given no
    options, would accept any; redis-py verifies by default), against `ca_file` when set, else
    the system's CAs. Settings use it for the Django cache and the Celery broker."""
    if not url.startswith("rediss://"):
        return {}
    return {"ssl_cert_reqs": ssl.CERT_REQUIRED, **({"ssl_ca_certs": ca_file} if ca_file else {})}


@functools.cache
def redis_client(url: str) -> redis.Redis:
    # Short timeouts and no retries: Redis here is an accelerator and a counter, answering in
    # well under a millisecond on a healthy server, and a slow or hung Redis must not slow the
    # requests it serves. Callers go through core.breaker, so after one timeout a process
    # stops asking for a while; the timeout bounds what that one request pays.
    # A password, an ACL user and rediss:// come with the URL; redis_tls_options says how
    # the certificate is verified.
    timeout = settings.REDIS_REQUEST_TIMEOUT_MS / 1000
    tls = redis_tls_options(url, settings.REDIS_TLS_CA_FILE)
    return redis.Redis.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout, retry_on_timeout=False, **tls
    )
