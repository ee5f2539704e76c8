"""A small HTTP client and a bounded load generator for the chaos suite (loopback only)."""

import http.client
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

# One row of the chaos table: scenario, figure, value, invariant held (None: a figure only).
Row = tuple[str, str, str, bool | None]


class Api:
    """One keep-alive connection (one per thread); reconnects after any error."""

    def __init__(self, port: int, key: str, timeout: float = 10) -> None:
        self.port, self.key, self.timeout = port, key, timeout
        self.conn: http.client.HTTPConnection | None = None

    def raw(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        """(status, body bytes, headers); status 0 for a connection error or timeout."""
        all_headers = {"Authorization": f"Bearer {self.key}", "Host": "127.0.0.1", **(headers or {})}
        if body is not None:
            all_headers.setdefault("Content-Type", "application/json")
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=all_headers)
                response = self.conn.getresponse()
                data = response.read()
                if response.getheader("connection", "").lower() == "close":
                    self.close()
                return response.status, data, dict(response.getheaders())
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    return 0, b"", {}
        return 0, b"", {}

    def call(self, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
        body = json.dumps(doc).encode() if doc is not None else None
        status, data, _ = self.raw(method, path, body)
        try:
            return status, json.loads(data) if data else None
        except ValueError:
            return status, None

    def ok(self, method: str, path: str, doc: Any = None, expect: tuple[int, ...] = (200, 201)) -> Any:
        status, data = self.call(method, path, doc)
        if status not in expect:
            raise RuntimeError(f"{method} {path}: {status} {data}")
        return data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def content(tag: str) -> dict[str, Any]:
    return {
        "system_prompt": f"Chaos bundle {tag}: refund orders with `process_refund`.",
        "tools": [
            {
                "name": "process_refund",
                "description": "Refund an order.",
                "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            }
        ],
    }


def bundle_with_label(api: Api, name: str) -> None:
    """A bundle `name` with v1 published and `production` on it."""
    api.ok("POST", "/api/v1/bundles/", {"name": name, "description": "chaos"})
    api.ok("POST", f"/api/v1/bundles/{name}/versions/", {"content": content(f"{name} v1"), "message": "v1"})
    api.ok("PUT", f"/api/v1/bundles/{name}/labels/production/", {"version": 1, "reason": "chaos"})


def move_to_v2(api: Api, name: str) -> None:
    api.ok("POST", f"/api/v1/bundles/{name}/versions/", {"content": content(f"{name} v2"), "message": "v2"})
    api.ok("PUT", f"/api/v1/bundles/{name}/labels/production/", {"version": 2, "reason": "chaos"})


def version_state(api: Api, name: str, number: int) -> str | None:
    status, data = api.call("GET", f"/api/v1/bundles/{name}/versions/{number}/")
    return data.get("state") if status == 200 and isinstance(data, dict) else None


@dataclass
class Sample:
    at: float
    kind: str
    status: int
    latency: float


@dataclass
class Load:
    """Closed-loop load from `threads` threads for at most `seconds`: each iteration fetches its
    session's bundle three times, and every fourth iteration starts and ends a session. Every
    acknowledged start (201) and end (200) is remembered, to be found in the database later."""

    port: int
    key: str
    bundle: str
    threads: int = 4
    samples: list[Sample] = field(default_factory=list)
    started_ids: set[str] = field(default_factory=set)
    ended_ids: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def _record(self, kind: str, began: float, status: int) -> None:
        with self.lock:
            self.samples.append(Sample(began, kind, status, time.monotonic() - began))

    def _worker(self) -> None:
        api = Api(self.port, self.key, timeout=10)
        session: str | None = None
        i = 0
        while not self.stop.is_set():
            i += 1
            if session is None or i % 4 == 0:
                began = time.monotonic()
                status, data = api.call(
                    "POST", "/api/v1/sessions/", {"bundle": self.bundle, "external_id": uuid.uuid4().hex}
                )
                self._record("start", began, status)
                if status == 201:
                    with self.lock:
                        self.started_ids.add(data["id"])
                    if session is not None:
                        began = time.monotonic()
                        end_status, _ = api.call("POST", f"/api/v1/sessions/{session}/end/")
                        self._record("end", began, end_status)
                        if end_status == 200:
                            with self.lock:
                                self.ended_ids.add(session)
                    session = data["id"]
                elif status == 0 or status >= 500:
                    time.sleep(0.05)  # an outage: do not spin
                continue
            for _ in range(3):
                began = time.monotonic()
                status, _, _ = api.raw("GET", f"/api/v1/sessions/{session}/bundle/")
                self._record("fetch", began, status)
                if status == 0 or status >= 500:
                    time.sleep(0.05)
        api.close()

    def __enter__(self) -> "Load":
        self._threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(self.threads)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(15)

    def window(self, start: float, end: float) -> list[Sample]:
        with self.lock:
            return [s for s in self.samples if start <= s.at < end]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]
