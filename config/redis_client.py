"""One long-lived redis-py client per process and URL, for the paths that run on every
request (the bytes cache, rate limits). Django's cache API builds a new client object on every
call, which costs more than the Redis round trip itself. redis-py's pool is fork-safe."""

import functools

import redis


@functools.cache
def redis_client(url: str) -> redis.Redis:
    # Short timeouts and no retries: Redis here is an accelerator and a counter, and a slow
    # Redis must not slow the requests it serves (callers fail open).
    return redis.Redis.from_url(url, socket_connect_timeout=0.25, socket_timeout=0.25, retry_on_timeout=False)
