"""The ASGI front of the service: a small prefix table in front of the sub-applications.

`config/asgi.py` builds one `Dispatcher` with routes such as

    Route("/api/v1/sessions/", fast_lane)      # per-turn session calls, no Django request cycle
    Route("/mcp", mcp_app, lifespan=True)      # an ASGI app with its own startup (issue 13)

and Django for every other path. The first route whose prefix matches wins; the sub-app sees
the scope unchanged (full path, same root_path). A sub-app may decline a request by raising
`Decline` before it sends anything (the fast lane does for the session paths it does not
serve), and the dispatcher then hands the request to the next matching route or the default.

Lifespan: the server sends one lifespan scope; the dispatcher runs the lifespan of every route
marked `lifespan=True` in its own task, starts them in table order and stops them in reverse,
and reports startup failure if any fails. Django itself has no lifespan. Once started, the
lifespan also runs the event-loop watchdog (edge.watchdog) when `watchdog_seconds` > 0.

Slow clients: the sync parts (Django, the fast lane's database calls) run on a bounded thread
pool, so they must never wait on a socket. `buffered_body` reads the whole request body on the
event loop first, with a size cap and a deadline, and hands the sub-app a `receive` that
replays it: a client that announces 100 bytes and sends 10 holds a coroutine, not a thread.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from edge.watchdog import LoopWatchdog

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# The scope (and WSGI environ) key under which a sub-app that declined a request says that its
# Bearer key is not a working key, with the key's SHA-256: Django's authentication then answers
# without looking the key up a second time (one lookup per request, api.authentication).
KEY_NOT_WORKING = "registry.key_not_working"


class Decline(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a sub-app before it has sent anything: "not mine, ask the next one". A sub-app
    that has already read the body passes `receive=replay(body)` so the next one can read it."""

    def __init__(self, receive: "Receive | None" = None) -> None:
        super().__init__()
        self.receive = receive


@dataclass(frozen=True)
class Route:
    prefix: str
    app: ASGIApp
    lifespan: bool = False  # forward the server's lifespan events to this app


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


async def buffered_body(receive: Receive, *, limit: int, timeout: float) -> tuple[bytes, bool]:
    """Read the request body on the event loop: (body, client still connected). Raises
    BodyTooLarge past `limit` bytes and BodyTimeout when the whole body has not arrived within
    `timeout` seconds."""
    chunks: list[bytes] = []
    size = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise BodyTimeout
        try:
            message = await asyncio.wait_for(receive(), remaining)
        except TimeoutError:
            raise BodyTimeout from None
        if message["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def replay(body: bytes, then: Receive | None = None) -> Receive:
    """A `receive` for the next app once `body` has been read: it yields `body` once, then hands
    over to `then` (the client's own receive, which reports its disconnect when it comes), or
    without `then` waits for nothing (reports a disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Dispatcher:
    def __init__(self, *, routes: list[Route], default: ASGIApp, watchdog_seconds: float = 0) -> None:
        self.routes = list(routes)
        self.default = default
        self.watchdog_seconds = watchdog_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope.get("path", "")
        for route in self.routes:
            if path.startswith(route.prefix):
                try:
                    await route.app(scope, receive, send)
                    return
                except Decline as decline:
                    receive = decline.receive or receive
                    continue
        await self.default(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        children = [_ChildLifespan(route) for route in self.routes if route.lifespan]
        message = await receive()
        assert message["type"] == "lifespan.startup"
        started: list[_ChildLifespan] = []
        for child in children:
            error = await child.startup()
            if error is not None:
                for done in reversed(started):
                    await done.shutdown()
                await send({"type": "lifespan.startup.failed", "message": f"{child.route.prefix}: {error}"})
                return
            started.append(child)
        await send({"type": "lifespan.startup.complete"})
        watchdog = LoopWatchdog(self.watchdog_seconds)
        watchdog.start()
        message = await receive()
        assert message["type"] == "lifespan.shutdown"
        await watchdog.stop()
        for child in reversed(started):
            await child.shutdown()
        await send({"type": "lifespan.shutdown.complete"})


class _ChildLifespan:
    """One sub-app's lifespan conversation, run in its own task with its own queues."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        try:
            await self.route.app(scope, self.inbox.get, self.outbox.put)
        except Exception as exc:
            logger.exception("lifespan of %s failed", self.route.prefix)
            await self.outbox.put({"type": "lifespan.startup.failed", "message": repr(exc)})

    async def startup(self) -> str | None:
        self.task = asyncio.create_task(self._run())
        await self.inbox.put({"type": "lifespan.startup"})
        reply = await self.outbox.get()
        if reply["type"] == "lifespan.startup.complete":
            return None
        return str(reply.get("message", "startup failed"))

    async def shutdown(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        if self.task is not None:
            try:
                await asyncio.wait_for(self.task, 10)
            except (TimeoutError, Exception):
                logger.warning("lifespan shutdown of %s did not finish cleanly", self.route.prefix, exc_info=True)
