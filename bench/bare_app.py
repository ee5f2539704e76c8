"""The benchmark's ceiling: an ASGI (and a WSGI) callable that answers every request with the
pinned-bundle bytes and an ETag, doing nothing else. `make bench` serves it with the same server
and worker count as the registry and divides the registry's figures by its figures.

The body comes from the file named in BARE_BODY_FILE (the benchmark writes the bytes a real
fetch returned), so both answer with byte-identical bodies."""

import os
from pathlib import Path

BODY = Path(os.environ["BARE_BODY_FILE"]).read_bytes() if os.environ.get("BARE_BODY_FILE") else b"{}" * 5800
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode()), (b"etag", b'"x"')]


async def application(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def wsgi(environ, start_response):
    start_response("200 OK", [(k.decode(), v.decode()) for k, v in _HEADERS])
    return [BODY]
