"""Django behind the ASGI dispatcher: the WSGI application, called on a fixed thread pool.

Measured against the alternatives (docs/performance.md): Django's own ASGI handler creates a
thread (and so a database connection) per request and served /healthz at about a quarter of
this; a2wsgi's bridge hops between the loop and the thread for every message. Here a request
is one hop: the body is read on the event loop first (edge.dispatch.buffered_body), the
WSGI call runs to completion in a pool thread (whose database connection persists, as under
gunicorn), and the collected response is sent from the loop. Django responses are not
streamed here, so collecting them is fine; static files are small (whitenoise)."""

import asyncio
import gc
import io
import json
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core import limits
from edge.dispatch import (
    KEY_NOT_WORKING,
    ASGIApp,
    BodyTimeout,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    buffered_body,
    send_json,
)

TOO_LARGE = json.dumps(
    {"error": {"code": "payload_too_large", "message": limits.TOO_LARGE_MESSAGE, "details": limits.TOO_LARGE_DETAILS}},
    separators=(",", ":"),
).encode()
TIMEOUT = b'{"error":{"code":"request_timeout","message":"The request body did not arrive in time.","details":{}}}'

_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    """The process's thread pool for sync work (created lazily: after the server forks)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=settings.WEB_THREADS, thread_name_prefix="web")
    return _pool


def shutdown_pool() -> None:
    """Stop the pool's threads; their database connections close with them (tests use this,
    so that the test database can be dropped)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True)
        _pool = None
        gc.collect()


def environ_of(scope: Scope, body: bytes) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of an ASGI HTTP scope whose body has been read."""
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode().decode("latin1"),
        "PATH_INFO": scope["path"].encode().decode("latin1"),
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 0),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.get("client")
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = client[0], str(client[1])
    for raw_name, raw_value in scope.get("headers", []):
        if b"_" in raw_name:
            # `X_Forwarded_For` would become HTTP_X_FORWARDED_FOR, the same key as the real
            # header, and forge the client address: drop such names, as nginx, gunicorn and
            # Django's runserver do (only the exact dashed header is ever read).
            continue
        name = raw_name.decode("latin1").upper().replace("-", "_")
        key = name if name in ("CONTENT_LENGTH", "CONTENT_TYPE") else f"HTTP_{name}"
        value = raw_value.decode("latin1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    if KEY_NOT_WORKING in scope:  # not an HTTP_ name: no client can set it
        environ[KEY_NOT_WORKING] = scope[KEY_NOT_WORKING]
    # The body has been read whole (also when it came chunked, without a Content-Length).
    environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def run_wsgi(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> tuple[int, list, bytes]:
    """Call a WSGI app to completion (in a pool thread): (status, headers, body)."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable:
        encoded = [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers]
        started[:] = [int(status.split(" ", 1)[0]), encoded]
        return lambda data: None

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()  # Django's request_finished (connection housekeeping) runs here
    return started[0], started[1], body


async def read_body(receive: Receive, send: Send) -> bytes | None:
    """The request body, read on the event loop (never on a thread) within MAX_REQUEST_BODY_BYTES
    and WEB_BODY_TIMEOUT; None when it was refused, and 413 or 408 has been answered."""
    try:
        body, _connected = await buffered_body(
            receive, limit=settings.MAX_REQUEST_BODY_BYTES, timeout=settings.WEB_BODY_TIMEOUT
        )
    except BodyTooLarge:
        await send_json(send, 413, TOO_LARGE, [(b"connection", b"close")])
        return None
    except BodyTimeout:
        await send_json(send, 408, TIMEOUT, [(b"connection", b"close")])
        return None
    return body


def django_app() -> ASGIApp:
    wsgi = get_wsgi_application()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive, send)
        if body is None:
            return
        environ = environ_of(scope, body)
        status, headers, content = await asyncio.get_running_loop().run_in_executor(pool(), run_wsgi, wsgi, environ)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    return app
