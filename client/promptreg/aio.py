"""The asyncio twin: `AsyncRegistry` and `AsyncPinnedSession`, the same behaviour as
`promptreg.sync` (retries, typed errors, content-hash cache, snapshots, keep-alive)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from promptreg import compaction, tracing
from promptreg._core import (
    API,
    USER_AGENT,
    Bundle,
    BundleCache,
    Retry,
    Snapshots,
    TurnPrefix,
    end_body,
    report_of,
    session_path,
    start_body,
    transport_error,
    warn_offline,
)
from promptreg.errors import RegistryError, Unavailable, error_from_response
from promptreg.messages import plain_messages
from promptreg.step import FILE_TOOLS, Step, checked_extra, client_format
from promptreg.step import absorb as step_absorb
from promptreg.step import send as step_send
from promptreg.sync import _lease_seconds

logger = logging.getLogger("promptreg")


class AsyncRegistry:
    """`Registry` for asyncio code; see its documentation."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        retry: Retry | None = None,
        snapshot_dir: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or Retry()
        self.snapshots = Snapshots(snapshot_dir) if snapshot_dir else None
        self.bundles = BundleCache()
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT},
            transport=transport,
        )

    async def __aenter__(self) -> AsyncRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        retry = self.retry if deadline is None else dataclasses.replace(self.retry, deadline=deadline)
        began = time.monotonic()
        attempt = 0
        while True:
            elapsed = time.monotonic() - began
            try:
                response = await self._http.request(
                    method,
                    path,
                    json=json,
                    params=params,
                    headers=tracing.with_trace_context(headers),
                    timeout=retry.attempt_timeout(elapsed),
                )
                if response.status_code < 400:
                    return response
                error = error_from_response(response)
            except httpx.TransportError as exc:
                error = transport_error(exc, self.url)
            wait = retry.wait(error=error, attempt=attempt, elapsed=time.monotonic() - began)
            if wait is None:
                raise error
            logger.info("promptreg: %s %s failed (%s); retrying in %.2fs", method, path, error, wait)
            await asyncio.sleep(wait)
            attempt += 1

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    async def start_session(
        self,
        bundle: str,
        *,
        label: str | None = None,
        version: int | None = None,
        external_id: str | None = None,
        variables: dict[str, Any] | None = None,
        ttl_seconds: int | None = None,
        keep_alive: bool = False,
        evaluation: bool = False,
    ) -> AsyncPinnedSession:
        body = start_body(
            bundle=bundle,
            label=label,
            version=version,
            external_id=external_id,
            variables=variables,
            ttl_seconds=ttl_seconds,
            evaluation=evaluation,
        )
        try:
            info = await self.json("POST", f"{API}/sessions/", json=body)
            session = AsyncPinnedSession(self, info)
            pinned = await session.get_bundle()
        except Unavailable as exc:
            offline = self.snapshots.load(bundle, label, version) if self.snapshots else None
            if offline is None:
                raise
            warn_offline(bundle=offline, label=label, reason=exc)
            return AsyncPinnedSession.offline_from(self, offline, label=label)
        if self.snapshots is not None:
            self.snapshots.save(pinned, label=label, version=version)
        if keep_alive:
            session.keep_alive()
        return session

    async def session(self, session_id: str) -> AsyncPinnedSession:
        return AsyncPinnedSession(self, await self.json("GET", session_path(session_id)))

    async def catalog(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        next_url: str | None = f"{API}/catalog/"
        while next_url:
            page = await self.json("GET", next_url)
            results.extend(page["results"])
            next_url = page.get("next")
        return results


class AsyncPinnedSession:
    """`PinnedSession` for asyncio code. `bundle` is available once `get_bundle()` ran (a
    started session has it already)."""

    def __init__(self, registry: AsyncRegistry, info: dict[str, Any], *, offline: bool = False) -> None:
        self.registry = registry
        self.info = info
        self.id: str = info["id"]
        self.bundle_name: str = info["bundle"]
        self.version: int = info["version"]
        self.content_hash: str = info["content_hash"]
        self.label: str | None = info.get("label")
        self.lease_seconds = _lease_seconds(info)
        self.offline = offline
        self.ended = False
        self._bundle: Bundle | None = None
        self.turn_prefix = TurnPrefix()
        self._keeper: asyncio.Task[None] | None = None
        self.keep_alive_error: RegistryError | None = None
        self.annotate_span()  # the span that started (or restored) the session

    @classmethod
    def offline_from(cls, registry: AsyncRegistry, pinned: Bundle, *, label: str | None) -> AsyncPinnedSession:
        info = {"id": "", "bundle": pinned.name, "version": pinned.version, "content_hash": pinned.content_hash}
        session = cls(registry, {**info, "label": label}, offline=True)
        session._bundle = pinned
        return session

    def __repr__(self) -> str:
        flag = " offline" if self.offline else ""
        return f"<AsyncPinnedSession {self.id or '-'} {self.bundle_name} v{self.version}{flag}>"

    async def __aenter__(self) -> AsyncPinnedSession:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.end()
        except RegistryError as error:
            if exc is None:
                raise
            logger.warning("promptreg: could not end session %s on exit: %s", self.id, error)

    @property
    def bundle(self) -> Bundle:
        if self._bundle is None:
            raise RuntimeError("Await get_bundle() first.")
        return self._bundle

    async def get_bundle(self) -> Bundle:
        if self._bundle is None:
            self._bundle = await self._fetch()
        return self._bundle

    async def refresh(self) -> Bundle:
        if self.offline:
            return self.bundle
        self._bundle = await self._fetch()
        return self._bundle

    async def _fetch(self) -> Bundle:
        self.annotate_span()
        known = self._bundle or self.registry.bundles.get(self.content_hash)
        headers = {"If-None-Match": f'"{self.content_hash}"'} if known else None
        response = await self.registry.request("GET", session_path(self.id, "bundle/"), headers=headers)
        if response.status_code == 304 and known is not None:
            return known
        pinned = Bundle.from_body(response.content)
        self.registry.bundles.put(pinned)
        return pinned

    async def heartbeat(self) -> dict[str, Any]:
        if self.offline:
            return self.info
        self.annotate_span()
        self.info = await self.registry.json("POST", session_path(self.id, "heartbeat/"))
        return self.info

    def keep_alive(self, interval: float | None = None) -> AsyncPinnedSession:
        """Heartbeat from a background task every `interval` seconds (default a third of the lease)."""
        if self.offline or self._keeper is not None:
            return self
        every = interval if interval is not None else max(0.5, self.lease_seconds / 3)

        async def run() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    self.info = await self.registry.json(
                        "POST", session_path(self.id, "heartbeat/"), deadline=max(1.0, self.lease_seconds - every)
                    )
                except RegistryError as error:
                    self.keep_alive_error = error
                    logger.warning("promptreg: keep-alive of session %s stopped: %s", self.id, error)
                    return

        self._keeper = asyncio.get_running_loop().create_task(run())
        return self

    async def end(self, outcome: str | None = None, *, reason: str | None = None) -> None:
        """`PinnedSession.end`: with `outcome`, how the session went."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        if self.offline or self.ended:
            return
        body = end_body(outcome, reason)
        self.info = await self.registry.json("POST", session_path(self.id, "end/"), json=body)
        self.ended = True

    async def score(
        self,
        name: str,
        value: float,
        *,
        source: str | None = None,
        comment: str | None = None,
        id: str | None = None,
    ) -> dict[str, Any]:
        """A named score of this session (a user's thumbs, a judge's verdict), accepted up to 7
        days after its end; the same `id` again is recorded once."""
        body = {"name": name, "value": value, "source": source, "comment": comment, "id": id}
        payload = {k: v for k, v in body.items() if v is not None}
        return await self.registry.json("POST", session_path(self.id, "scores/"), json=payload)

    def _online(self, what: str) -> None:
        if self.offline:
            raise Unavailable(f"{what} needs the registry; this session is offline (from a snapshot).")
        self.annotate_span()

    def annotate_span(self) -> None:
        """Set the pinned version on the caller's current OpenTelemetry span, when
        opentelemetry is installed (promptreg.tracing); every session call does."""
        tracing.annotate(
            bundle=self.bundle_name, version=self.version, content_hash=self.content_hash, session_id=self.id
        )

    async def render(self, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        self._online("render")
        body = {"variables": variables} if variables is not None else {}
        return await self.registry.json("POST", session_path(self.id, "render/"), json=body)

    async def turn(
        self,
        messages: Sequence[Any],
        *,
        invoked: list[str] | None = None,
        variables: dict[str, Any] | None = None,
        format: str | None = None,
        k: int | None = None,
        response: Any = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> dict[str, Any]:
        """`PinnedSession.turn`: one call per turn, the prefix kept by its hash."""
        self._online("turn")
        body = self.turn_prefix.body(messages, invoked=invoked, variables=variables, format=format, k=k)
        body.update(report_of(response, usage))  # the previous model call's answer or usage
        if model is not None:  # instead of the pinned model.name: one the version allows
            body["model"] = model
        answer = await self.registry.json("POST", session_path(self.id, "turn/"), json=body)
        return self.turn_prefix.absorb(answer)

    async def step(
        self,
        client: Any,
        messages: Sequence[Any],
        *,
        format: str | None = None,
        invoked: list[str] | None = None,
        variables: dict[str, Any] | None = None,
        **create: Any,
    ) -> Step:
        """`PinnedSession.step` with an async SDK client (`AsyncAnthropic`, `AsyncOpenAI`)."""
        fmt, extra = client_format(client, format), checked_extra(create)
        turn = await self.turn(messages, invoked=invoked, variables=variables, format=fmt)
        return step_absorb(fmt, turn, await step_send(client, fmt, {**turn["request"], **extra}))

    async def file_tool(self, tool: str, **params: Any) -> str:
        """One of the model's file tools over the session's knowledge packs (`ls`, `glob`, `grep`,
        `read`; params as docs/rendering.md gives them): GET .../knowledge/{tool}. The answer
        is the text for the model (at most 100 KB; its last line then says how to go on)."""
        self._online("file_tool")
        if tool not in FILE_TOOLS:
            raise ValueError(f"tool must be one of {', '.join(FILE_TOOLS)}.")
        query = {key: value for key, value in params.items() if value is not None}
        answer = await self.registry.json("GET", session_path(self.id, f"knowledge/{tool}"), params=query)
        return str(answer["output"])

    async def route(self, messages: Sequence[Any], *, k: int = 5) -> dict[str, Any]:
        self._online("route")
        return await self.registry.json(
            "POST", session_path(self.id, "route/"), json={"messages": plain_messages(messages), "k": k}
        )

    async def report_turn(self, turn: int, invoked: list[str], *, expected: list[str] | None = None) -> dict[str, Any]:
        self._online("report_turn")
        body: dict[str, Any] = {"turn": turn, "invoked": invoked}
        if expected is not None:
            body["expected"] = expected
        return await self.registry.json("POST", session_path(self.id, "turns/"), json=body)

    async def compact(self, messages: Sequence[Any], *, local: bool = False) -> dict[str, Any]:
        messages = plain_messages(messages)
        if local or self.offline:
            return compaction.compact(messages, compaction.policy_from_content(self.bundle.content)).as_dict()
        return await self.registry.json("POST", session_path(self.id, "compact/"), json={"messages": messages})
