"""One long-lived redis-py client per process and URL, for the paths that run on every
request (the bytes cache, rate limits). Django's cache API builds a new client object on every
call, which costs more than the Redis round trip itself. redis-py's pool is fork-safe."""

import functools

import redis
from django.conf import settings


@functools.cache
def redis_client(url: str) -> redis.Redis:
    # Short timeouts and no retries: Redis here is an accelerator and a counter, answering in
    # well under a millisecond on a healthy server, and a slow or hung Redis must not slow the
    # requests it serves. Callers go through config.breaker, so after one timeout a process
    # stops asking for a while; the timeout bounds what that one request pays.
    timeout = settings.REDIS_REQUEST_TIMEOUT_MS / 1000
    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, retry_on_timeout=False)
