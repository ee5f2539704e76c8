"""The blocking client: `Registry` and the `PinnedSession` it starts."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
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
from promptreg.errors import RegistryError, SessionEnded, Unavailable, VersionRevoked, error_from_response
from promptreg.messages import plain_messages
from promptreg.step import FILE_TOOLS, Step, checked_extra, client_format
from promptreg.step import absorb as step_absorb
from promptreg.step import send as step_send

logger = logging.getLogger("promptreg")


class Registry:
    """A connection to one registry with one API key.

    `url` is the service root (`http://127.0.0.1:8000`). `retry` bounds every call (see
    `Retry`). With `snapshot_dir`, each bundle a session starts on is saved per (bundle,
    label), and a start that cannot reach the registry returns a session from that snapshot
    flagged `offline=True`, with a warning."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        retry: Retry | None = None,
        snapshot_dir: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or Retry()
        self.snapshots = Snapshots(snapshot_dir) if snapshot_dir else None
        self.bundles = BundleCache()
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT},
            transport=transport,
        )

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- the one place that talks HTTP ----------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """Send one request, retrying as `Retry` says; a 2xx or 304 is returned, any other
        answer raises its typed error. `path` is relative to the service root."""
        retry = self.retry if deadline is None else dataclasses.replace(self.retry, deadline=deadline)
        began = time.monotonic()
        attempt = 0
        while True:
            elapsed = time.monotonic() - began
            try:
                response = self._http.request(
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
            time.sleep(wait)
            attempt += 1

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # --- sessions --------------------------------------------------------------------------

    def start_session(
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
    ) -> PinnedSession:
        """Pin a session to what `label` (default production) targets now, or to `version`,
        and fetch its bundle. Use it as a context manager to end it on exit. `evaluation` (with
        `version`): an evaluation run's session, which leaves an unreleased version unreleased."""
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
            info = self.json("POST", f"{API}/sessions/", json=body)
            session = PinnedSession(self, info)
            pinned = session.bundle
        except Unavailable as exc:
            offline = self.snapshots.load(bundle, label, version) if self.snapshots else None
            if offline is None:
                raise
            warn_offline(bundle=offline, label=label, reason=exc)
            return PinnedSession.offline_from(self, offline, label=label)
        if self.snapshots is not None:
            self.snapshots.save(pinned, label=label, version=version)
        if keep_alive:
            session.keep_alive()
        return session

    def session(self, session_id: str) -> PinnedSession:
        """An existing session (e.g. one an earlier process started), by id."""
        return PinnedSession(self, self.json("GET", session_path(session_id)))

    # --- catalog and publishing (used by the CLI) -------------------------------------------

    def catalog(self) -> list[dict[str, Any]]:
        """What this key may start sessions on, with `when_to_use` and labels."""
        return self._all(f"{API}/catalog/")

    def mcp_check(self) -> dict[str, Any]:
        """Run the registry's MCP drift check now (ops): the drifts of pinned MCP tools."""
        return self.json("POST", f"{API}/mcp-servers/check/")

    def _all(self, path: str) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        next_url: str | None = path
        while next_url:
            page = self.json("GET", next_url)
            results.extend(page["results"])
            next_url = page.get("next")
        return results

    def bundle_info(self, name: str) -> dict[str, Any]:
        return self.json("GET", f"{API}/bundles/{name}/")

    def create_bundle(self, name: str, *, description: str = "", when_to_use: str = "") -> dict[str, Any]:
        return self.json(
            "POST", f"{API}/bundles/", json={"name": name, "description": description, "when_to_use": when_to_use}
        )

    def version_info(self, name: str, number: int) -> dict[str, Any]:
        return self.json("GET", f"{API}/bundles/{name}/versions/{number}/")

    def versions(self, name: str) -> list[dict[str, Any]]:
        """Every version of the bundle with its content, oldest first."""
        return sorted(self._all(f"{API}/bundles/{name}/versions/"), key=lambda v: v["number"])

    def label_info(self, name: str, label: str) -> dict[str, Any]:
        return self.json("GET", f"{API}/bundles/{name}/labels/{label}/")

    def publish(self, name: str, content: dict[str, Any], *, message: str = "") -> tuple[dict[str, Any], bool]:
        """Publish `content`; returns (version, created). Identical content returns the
        existing version with created=False, so publishing is safe to repeat."""
        body = {"content": content, "message": message}
        response = self.request("POST", f"{API}/bundles/{name}/versions/", json=body)
        return response.json(), response.status_code == 201

    def move_label(
        self, name: str, label: str, *, version: int, reason: str, allow_breaking: bool = False
    ) -> dict[str, Any]:
        body = {"version": version, "reason": reason, "allow_breaking": allow_breaking}
        return self.json("PUT", f"{API}/bundles/{name}/labels/{label}/", json=body)

    def report_check(
        self,
        name: str,
        version: int,
        *,
        check: str,
        status: str,
        summary: str = "",
        details_url: str = "",
    ) -> dict[str, Any]:
        """Record a check (an evaluation run by CI) for a version's content hash."""
        body: dict[str, Any] = {"name": check, "status": status}
        if summary:
            body["summary"] = summary
        if details_url:
            body["details_url"] = details_url
        return self.json("POST", f"{API}/bundles/{name}/versions/{version}/checks/", json=body)

    # --- export and import (content-addressed; promptreg.transfer) --------------------------

    def bundle_names(self) -> list[str]:
        return [entry["name"] for entry in self._all(f"{API}/bundles/")]

    def export_document(self, name: str) -> dict[str, Any]:
        """The bundle's document: texts, versions by content hash, labels as data."""
        return self.json("GET", f"{API}/bundles/{name}/export/")

    def canonical(self, name: str, number: int) -> bytes:
        """A version's canonical bytes, exactly those its content hash is the SHA-256 of."""
        return self.request("GET", f"{API}/bundles/{name}/versions/{number}/canonical/").content

    def import_document(
        self, name: str, document: dict[str, Any], objects: dict[str, bytes], *, allow_breaking: bool = False
    ) -> dict[str, Any]:
        """One import call (all or nothing on the server; idempotent, so safe to retry)."""
        body = {
            "bundle": document,
            "objects": {digest: data.decode("utf-8") for digest, data in objects.items()},
            "allow_breaking": allow_breaking,
        }
        return self.json("POST", f"{API}/bundles/{name}/import/", json=body)

    def diff(self, name: str, a: int, b: int) -> dict[str, Any]:
        """How version `b` differs from `a`: the compatibility level and each change."""
        return self.json("GET", f"{API}/bundles/{name}/versions/{b}/diff/", params={"against": a})


def _lease_seconds(info: dict[str, Any]) -> float:
    try:
        seen = datetime.fromisoformat(info["last_seen_at"])
        expires = datetime.fromisoformat(info["expires_at"])
        return max(1.0, (expires - seen).total_seconds())
    except (KeyError, TypeError, ValueError):
        return 1800.0


class PinnedSession:
    """A session pinned to one immutable version. `bundle` is fetched once and kept for the
    session's life: it cannot change, so there is nothing to expire. A context manager that
    ends the session on exit, exceptions included."""

    def __init__(self, registry: Registry, info: dict[str, Any], *, offline: bool = False) -> None:
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
        self._keeper: threading.Thread | None = None
        self._stop = threading.Event()
        self.keep_alive_error: RegistryError | None = None
        self.annotate_span()  # the span that started (or restored) the session

    @classmethod
    def offline_from(cls, registry: Registry, pinned: Bundle, *, label: str | None) -> PinnedSession:
        info = {"id": "", "bundle": pinned.name, "version": pinned.version, "content_hash": pinned.content_hash}
        session = cls(registry, {**info, "label": label}, offline=True)
        session._bundle = pinned
        return session

    def __repr__(self) -> str:
        flag = " offline" if self.offline else ""
        return f"<PinnedSession {self.id or '-'} {self.bundle_name} v{self.version}{flag}>"

    def __enter__(self) -> PinnedSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.end()
        except RegistryError as error:
            if exc is None:
                raise
            # Do not mask the exception that left the block; the lease ends the session anyway.
            logger.warning("promptreg: could not end session %s on exit: %s", self.id, error)

    # --- the bundle --------------------------------------------------------------------------

    @property
    def bundle(self) -> Bundle:
        """The pinned bundle, fetched on first use (a 304 when another session already holds
        the same content hash), then served from memory."""
        if self._bundle is None:
            self._bundle = self._fetch()
        return self._bundle

    def refresh(self) -> Bundle:
        """Ask the registry whether the session still stands (renewing its lease); raises
        SessionEnded or VersionRevoked. The bytes come back only if never fetched: 304."""
        if self.offline:
            return self.bundle
        self._bundle = self._fetch()
        return self._bundle

    def _fetch(self) -> Bundle:
        self.annotate_span()
        known = self._bundle or self.registry.bundles.get(self.content_hash)
        headers = {"If-None-Match": f'"{self.content_hash}"'} if known else None
        response = self.registry.request("GET", session_path(self.id, "bundle/"), headers=headers)
        if response.status_code == 304 and known is not None:
            return known
        pinned = Bundle.from_body(response.content)
        self.registry.bundles.put(pinned)
        return pinned

    # --- lease -------------------------------------------------------------------------------

    def heartbeat(self) -> dict[str, Any]:
        """Renew the lease; raises SessionEnded once the session is over."""
        if self.offline:
            return self.info
        self.annotate_span()
        self.info = self.registry.json("POST", session_path(self.id, "heartbeat/"))
        return self.info

    def keep_alive(self, interval: float | None = None) -> PinnedSession:
        """Heartbeat in a background thread every `interval` seconds (default a third of the
        lease, so two can fail before it lapses) until the session ends. A failure that the
        retries cannot fix within the lease stops it and is kept in `keep_alive_error`."""
        if self.offline or self._keeper is not None:
            return self
        every = interval if interval is not None else max(0.5, self.lease_seconds / 3)

        def run() -> None:
            while not self._stop.wait(every):
                try:
                    # Retrying longer than the lease is pointless: the session would be gone.
                    self.info = self.registry.json(
                        "POST", session_path(self.id, "heartbeat/"), deadline=max(1.0, self.lease_seconds - every)
                    )
                except RegistryError as error:
                    self.keep_alive_error = error
                    logger.warning("promptreg: keep-alive of session %s stopped: %s", self.id, error)
                    return

        self._keeper = threading.Thread(target=run, name=f"promptreg-keepalive-{self.id[:8]}", daemon=True)
        self._keeper.start()
        return self

    def end(self, outcome: str | None = None, *, reason: str | None = None) -> None:
        """End the session (idempotent) and stop the keep-alive. `outcome` (`resolved`,
        `escalated`, `abandoned`, `failed`) and `reason`: how it went, for the version's
        evidence (docs/api.md#evidence); another outcome than the first is refused (409)."""
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join(timeout=self.registry.retry.timeout)
        if self.offline or self.ended:
            return
        body = end_body(outcome, reason)
        self.info = self.registry.json("POST", session_path(self.id, "end/"), json=body)
        self.ended = True

    def score(
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
        return self.registry.json("POST", session_path(self.id, "scores/"), json=payload)

    # --- per-turn calls ----------------------------------------------------------------------

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

    def render(self, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The prompt for this turn: a byte-stable `prefix` (system text and tools, cacheable by
        `prefix_sha256`) and a volatile `tail` (date, turn variables, notices)."""
        self._online("render")
        body = {"variables": variables} if variables is not None else {}
        return self.registry.json("POST", session_path(self.id, "render/"), json=body)

    def turn(
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
        """One call per turn: what render, route, turns and compact answer, in one request.

        `messages`: the conversation so far; `invoked`: the skills the model called in the
        previous turn; `variables`: turn-scoped variables; `format` (`anthropic`,
        `openai-responses`, `openai-chat`, `bedrock-converse`, `gemini`): the answer's
        `request` is then the provider request body, ready to send. The stable prefix crosses
        the network once per session and format: later calls send its hash, and the answer's
        `prefix` and the stable part of its `request` are the ones this session holds
        (`prefix_unchanged` tells which happened); the answer is always whole. `model`: the model
        to name in `request` instead of the pinned one (one the version allows, or any when it
        names none); `response` / `usage`: the previous model call's (the version's evidence)."""
        self._online("turn")
        body = self.turn_prefix.body(messages, invoked=invoked, variables=variables, format=format, k=k)
        body.update(report_of(response, usage))  # the previous model call's answer or usage
        if model is not None:  # instead of the pinned model.name: one the version allows
            body["model"] = model
        return self.turn_prefix.absorb(self.registry.json("POST", session_path(self.id, "turn/"), json=body))

    def step(
        self,
        client: Any,
        messages: Sequence[Any],
        *,
        format: str | None = None,
        invoked: list[str] | None = None,
        variables: dict[str, Any] | None = None,
        **create: Any,
    ) -> Step:
        """One step of an agent loop with an official SDK client (`anthropic.Anthropic`, or
        `openai.OpenAI` with `format="openai-responses"` / `"openai-chat"`): the turn call, the
        SDK's `create(**turn["request"], **create)`, and the reply appended. `step.messages` is
        the conversation for the next step (the turn's, compacted, plus the reply);
        `step.tool_calls` what the model asked for (answer them with
        `step.with_tool_results({call.id: result})`); `step.done` when it asked for none."""
        fmt, extra = client_format(client, format), checked_extra(create)
        turn = self.turn(messages, invoked=invoked, variables=variables, format=fmt)
        return step_absorb(fmt, turn, step_send(client, fmt, {**turn["request"], **extra}))

    def file_tool(self, tool: str, **params: Any) -> str:
        """One of the model's file tools over the session's knowledge packs (`ls`, `glob`, `grep`,
        `read`; params as docs/rendering.md gives them): GET .../knowledge/{tool}. The answer
        is the text for the model (at most 100 KB; its last line then says how to go on)."""
        self._online("file_tool")
        if tool not in FILE_TOOLS:
            raise ValueError(f"tool must be one of {', '.join(FILE_TOOLS)}.")
        query = {key: value for key, value in params.items() if value is not None}
        answer = self.registry.json("GET", session_path(self.id, f"knowledge/{tool}"), params=query)
        return str(answer["output"])

    def route(self, messages: Sequence[Any], *, k: int = 5) -> dict[str, Any]:
        """The skills to show this turn: resident, routed (with scores and why) and session ones."""
        self._online("route")
        return self.registry.json(
            "POST", session_path(self.id, "route/"), json={"messages": plain_messages(messages), "k": k}
        )

    def report_turn(self, turn: int, invoked: list[str], *, expected: list[str] | None = None) -> dict[str, Any]:
        """Tell the registry which skills the model actually called in `turn`; `expected`, when
        known (a review, an evaluation), labels the skills the turn needed (decision error rate)."""
        self._online("report_turn")
        body: dict[str, Any] = {"turn": turn, "invoked": invoked}
        if expected is not None:
            body["expected"] = expected
        return self.registry.json("POST", session_path(self.id, "turns/"), json=body)

    def compact(self, messages: Sequence[Any], *, local: bool = False) -> dict[str, Any]:
        """Tier-1 micro-compaction of old tool results under the pinned policy. By the
        registry, or with `local=True` (and always when offline) by the same pure function
        in-process: the results are identical."""
        messages = plain_messages(messages)
        if local or self.offline:
            return compaction.compact(messages, compaction.policy_from_content(self.bundle.content)).as_dict()
        return self.registry.json("POST", session_path(self.id, "compact/"), json={"messages": messages})


__all__ = ["PinnedSession", "Registry", "SessionEnded", "VersionRevoked"]
