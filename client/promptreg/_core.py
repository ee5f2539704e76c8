"""What the sync and the async client share: the retry schedule, the pinned bundle, the
content-hash cache and the offline snapshots. No I/O on the network here."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import threading
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cachetools import LRUCache

from promptreg.errors import IntegrityError, RegistryError, Throttled, Unavailable
from promptreg.messages import plain_messages

logger = logging.getLogger("promptreg")

API = "/api/v1"
USER_AGENT = "promptreg/0.1"


class OfflineWarning(UserWarning):
    """A session was served from a local snapshot because the registry could not be reached."""


@dataclass(frozen=True)
class Retry:
    """Exponential backoff with full jitter, bounded by a total deadline per call.

    Retried: connection errors and timeouts, 502, 503, 504 and 429 (waiting at least the
    server's Retry-After). Never retried: any other 4xx, which would fail the same way again.
    Every request the client retries is idempotent: reads, heartbeats, ends, publishing
    (identical content returns the existing version), label PUTs, and session starts, which
    always carry an external_id so that a retried start returns the same session."""

    deadline: float = 30.0  # seconds for one call, every attempt and wait included
    initial: float = 0.2
    maximum: float = 5.0
    multiplier: float = 2.0
    timeout: float = 10.0  # per attempt, cut to what is left of the deadline

    def wait(self, *, error: RegistryError, attempt: int, elapsed: float) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None to give up and raise `error`."""
        if not isinstance(error, (Unavailable, Throttled)):
            return None
        ceiling = min(self.maximum, self.initial * self.multiplier**attempt)
        wait = random.uniform(0, ceiling)  # full jitter: clients that failed together spread out
        retry_after = error.retry_after
        if retry_after is not None:
            wait = max(wait, retry_after)
        if elapsed + wait >= self.deadline:
            return None
        return wait

    def attempt_timeout(self, elapsed: float) -> float:
        return max(0.1, min(self.timeout, self.deadline - elapsed))


def transport_error(exc: httpx.TransportError, url: str) -> Unavailable:
    return Unavailable(f"Cannot reach the registry at {url}: {type(exc).__name__}: {exc}".rstrip(": "))


def canonical_bytes(value: Any) -> bytes:
    """The registry's canonical JSON: keys sorted, no whitespace, UTF-8 unescaped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


@dataclass(frozen=True)
class Bundle:
    """A pinned bundle: immutable, identified by its content hash. `raw` is the exact body the
    registry served (the same bytes on every fetch for every session of this version)."""

    name: str
    version: int
    content_hash: str
    content: dict[str, Any]
    raw: bytes = field(repr=False)

    @classmethod
    def from_body(cls, raw: bytes) -> Bundle:
        doc = json.loads(raw)
        content = doc["content"]
        digest = hashlib.sha256(canonical_bytes(content)).hexdigest()
        if digest != doc["content_hash"]:
            raise IntegrityError(f"Bundle {doc['bundle']} v{doc['version']} does not match its content hash.")
        return cls(name=doc["bundle"], version=doc["version"], content_hash=digest, content=content, raw=raw)

    @property
    def system_prompt(self) -> str:
        return self.content["system_prompt"]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.content.get("tools", [])

    @property
    def guardrails(self) -> dict[str, Any]:
        return self.content.get("guardrails", {})

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.content.get("output_schema")

    @property
    def model(self) -> dict[str, Any]:
        return self.content.get("model", {})

    @property
    def metadata(self) -> dict[str, Any]:
        return self.content.get("metadata", {})


class BundleCache:
    """Bundles by content hash. No TTL anywhere: a hash names bytes that can never change, so
    an entry is never stale; the bound only limits memory (least recently used goes first)."""

    def __init__(self, size: int = 64) -> None:
        self._items: LRUCache[str, Bundle] = LRUCache(maxsize=size)
        self._lock = threading.Lock()

    def get(self, content_hash: str) -> Bundle | None:
        with self._lock:
            return self._items.get(content_hash)

    def put(self, bundle: Bundle) -> None:
        with self._lock:
            self._items[bundle.content_hash] = bundle


def new_external_id() -> str:
    return f"promptreg-{uuid.uuid4().hex}"


def start_body(
    *,
    bundle: str,
    label: str | None,
    version: int | None,
    external_id: str | None,
    variables: dict[str, Any] | None,
    ttl_seconds: int | None,
    evaluation: bool = False,
) -> dict[str, Any]:
    if label is not None and version is not None:
        raise ValueError("Give label or version, not both.")
    if evaluation and version is None:
        raise ValueError("evaluation applies to a session pinned by version.")
    body: dict[str, Any] = {"bundle": bundle, "external_id": external_id or new_external_id()}
    if label is not None:
        body["label"] = label
    if version is not None:
        body["version"] = version
    if variables is not None:
        body["variables"] = variables
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    if evaluation:
        body["evaluation"] = True
    return body


class Snapshots:
    """Opt-in offline fallback: the last bundle started on per (bundle, label or version),
    saved as the registry's exact bytes, written atomically."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, bundle: str, label: str | None, version: int | None) -> Path:
        # Bundle and label names are [a-z0-9._-]: safe as file names as they are.
        return self.directory / f"{bundle}@{f'v{version}' if version is not None else label or 'production'}.json"

    def save(self, pinned: Bundle, *, label: str | None, version: int | None) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            target = self._path(pinned.name, label, version)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "wb") as out:
                out.write(pinned.raw)
            os.replace(tmp, target)
        except OSError as exc:  # a full disk must not fail a session that the registry started
            logger.warning("promptreg: could not save the offline snapshot of %s: %s", pinned.name, exc)

    def load(self, bundle: str, label: str | None, version: int | None) -> Bundle | None:
        path = self._path(bundle, label, version)
        try:
            return Bundle.from_body(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, RegistryError) as exc:
            logger.warning("promptreg: ignoring the unreadable snapshot %s: %s", path, exc)
            return None


def warn_offline(*, bundle: Bundle, label: str | None, reason: RegistryError) -> None:
    """Never silently: a warning (for people) and a log line (for operators)."""
    message = (
        f"promptreg: the registry is unreachable ({reason.message}); session on {bundle.name} "
        f"{label or 'production'} served OFFLINE from a local snapshot of v{bundle.version} "
        f"({bundle.content_hash[:12]}). It is not pinned on the server and may be outdated."
    )
    logger.warning(message)
    warnings.warn(message, OfflineWarning, stacklevel=3)


def session_path(session_id: str, tail: str = "") -> str:
    return f"{API}/sessions/{session_id}/{tail}"


# Bounds the turn call's fields the client checks before sending (the server checks them too).
TURN_FORMATS = ("anthropic", "openai-responses", "openai-chat", "bedrock-converse", "gemini")


class TurnPrefix:
    """The stable prefix (system text and tools) one session holds, kept by its SHA-256, and the
    last complete provider request of each format built on it.

    The one-call turn sends `prefix_sha256` once the session holds what the answer would leave
    out: the prefix, and for a `format` a complete request of that format. The registry then
    answers `"prefix_unchanged": true` without the prefix's bytes, and with a `format` a
    `request` without its stable part (`request_reuse` says which keys and leading messages).
    `absorb` puts both back, so every answer the caller sees is whole (and carries no
    `request_reuse`) while the bytes crossed the network once per session and format (again
    only when the prefix itself changed: a DUTY.md edit). A prefix whose bytes do not match
    the hash the registry gave is refused."""

    def __init__(self) -> None:
        self.sha256: str | None = None
        self.prefix: dict[str, Any] | None = None
        self.requests: dict[str, dict[str, Any]] = {}  # format -> the last complete request on this prefix
        self.received = 0  # answers that carried the prefix's bytes (for tests and benchmarks)
        self._lock = threading.Lock()

    def body(
        self,
        messages: Sequence[Any],
        *,
        invoked: list[str] | None,
        variables: dict[str, Any] | None,
        format: str | None,
        k: int | None,
    ) -> dict[str, Any]:
        if format is not None and format not in TURN_FORMATS:
            raise ValueError(f"format must be one of {', '.join(TURN_FORMATS)}, or None for the neutral shape.")
        body: dict[str, Any] = {"messages": plain_messages(messages)}
        if invoked is not None:
            body["invoked"] = invoked
        if variables is not None:
            body["variables"] = variables
        if format is not None:
            body["format"] = format
        if k is not None:
            body["k"] = k
        with self._lock:
            # Only what can be put back may be left out: a format asked for the first time on
            # this prefix comes whole (the client cannot lay out a provider's request itself).
            if self.sha256 is not None and (format is None or format in self.requests):
                body["prefix_sha256"] = self.sha256
        return body

    def absorb(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer made whole: its prefix and request, as carried (then held) or as held."""
        with self._lock:
            answer = dict(answer)
            if answer.get("prefix_unchanged"):
                if self.prefix is None or answer.get("prefix_sha256") != self.sha256:
                    raise IntegrityError("The registry said the prefix is unchanged, but this client holds another.")
                answer["prefix"] = self.prefix
            else:
                prefix = answer.get("prefix")
                if isinstance(prefix, dict):
                    digest = hashlib.sha256(canonical_bytes(prefix)).hexdigest()
                    if digest != answer.get("prefix_sha256"):
                        raise IntegrityError("The turn's prefix does not match its prefix_sha256.")
                    if digest != self.sha256:
                        self.requests = {}  # built on the previous prefix
                    self.sha256, self.prefix = digest, prefix
                    self.received += 1
            fmt, request = answer.get("format"), answer.get("request")
            if isinstance(fmt, str) and isinstance(request, dict):
                reuse = answer.pop("request_reuse", None)
                if reuse:
                    held = self.requests.get(fmt)
                    if held is None:
                        raise IntegrityError(
                            f"The registry left out the stable part of a {fmt} request this client never held."
                        )
                    answer["request"] = request = whole_request(request, held, reuse)
                self.requests[fmt] = request
                if "messages" not in answer:  # carried once, in `request`: the caller still gets it
                    answer["messages"] = turn_conversation(fmt, request, answer.get("turn_text") or "")
            return answer


def whole_request(partial: dict[str, Any], held: dict[str, Any], reuse: dict[str, Any]) -> dict[str, Any]:
    """A request the registry sent without its stable part, completed from `held` (the last
    complete request of the same format and prefix) as `reuse` says (docs/api.md, the turn call)."""
    keys, list_key, lead = reuse["keys"], reuse["list"], reuse["messages"]
    whole = {key: held[key] for key in held if key in keys}
    whole.update(partial)
    whole[list_key] = [*held[list_key][:lead], *partial.get(list_key, [])]
    return whole


# Where a request holds the conversation: its list, and how many entries lead it (openai-chat's
# system message); the per-turn text follows it (docs/api.md, the turn call).
REQUEST_CONVERSATION = {
    "anthropic": ("messages", 0),
    "openai-chat": ("messages", 1),
    "openai-responses": ("input", 0),
    "bedrock-converse": ("messages", 0),
    "gemini": ("contents", 0),
}


def turn_conversation(fmt: str, request: dict[str, Any], turn_text: str) -> list[Any]:
    """The compacted conversation a complete `request` carries (a turn answered with `format`
    leaves `messages` out): its list less the leading entries and less the per-turn text, which
    is the last entry's last block (`content` or `parts`), or that entry whole when it holds
    only the text."""
    key, lead = REQUEST_CONVERSATION[fmt]
    entries = list(request.get(key) or [])[lead:]
    if not turn_text or not entries or not isinstance(entries[-1], dict):
        return entries
    last = entries[-1]
    field_name = "parts" if fmt == "gemini" else "content"
    held = last.get(field_name)
    if held == turn_text:
        return entries[:-1]
    if isinstance(held, list) and held and isinstance(held[-1], dict) and held[-1].get("text") == turn_text:
        rest = held[:-1]
        return [*entries[:-1], {**last, field_name: rest}] if rest else entries[:-1]
    return entries


def end_body(outcome: str | None, reason: str | None) -> dict[str, Any] | None:
    """An end's body: none for a plain end, else the outcome (docs/api.md#evidence)."""
    if outcome is None:
        return None
    return {"outcome": {"status": outcome, **({"reason": reason} if reason is not None else {})}}


def report_of(response: Any, usage: dict[str, Any] | None) -> dict[str, Any]:
    """The turn's report of the previous model call: the provider's answer as the SDK returned
    it (a pydantic model is dumped to its JSON shape) and/or the neutral usage."""
    out: dict[str, Any] = {}
    if response is not None:
        dump = getattr(response, "model_dump", None) or getattr(response, "to_dict", None)
        out["response"] = dump(mode="json") if getattr(response, "model_dump", None) else (dump() if dump else response)
    if usage is not None:
        out["usage"] = usage
    return out
