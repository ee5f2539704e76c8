"""Webhook tarpit: a receiver on loopback that accepts every delivery and trickles its answer
(one byte of the status line every `drip` seconds, never finishing), subscribed to every event,
while sessions lapse and versions drain. Before the split, its attempts took every worker slot
and the per-phase timeout never fired: sessions stopped expiring, drains never happened, and
the retry sweep re-queued the backlog every 5 s.

Figures: lapsed-session expiry latency (from the lease running out to the session's status
being `expired`) and drain latency (from the last session's end to the version being
`drained`), first with no webhook endpoint, then with the tarpit subscribed to everything and a
backlog of deliveries for it; the length of the `deliveries` queue (sampled) and how long the
tarpit held an attempt at most.

Invariants: while it tarpits, expiry and drain latencies stay within max(2 x the baseline, the
baseline + 2 sweep intervals) (the sweep runs every 2 s on the chaos stack); the queue never
holds more than the endpoint's concurrency limit plus the events emitted since the last sweep
could add (bounded at 50 here); no attempt is held longer than the deadline plus 2 s."""

import socket
import statistics
import threading
import time
from typing import TYPE_CHECKING

from chaos.client import Api, Row, bundle_with_label, content, move_to_v2, version_state

if TYPE_CHECKING:
    from chaos.stack import Stack


class Tarpit:
    """A TCP server on 127.0.0.1 that reads each request and trickles `HTTP/1.1 200 OK`...
    one byte per `drip` seconds for at most `hold` seconds, then closes. Records how long each
    connection was held (until the client gave up or `hold` passed)."""

    def __init__(self, *, drip: float = 0.5, hold: float = 120.0) -> None:
        self.drip, self.hold = drip, hold
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.held: list[float] = []
        self.accepted = 0
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        began = time.monotonic()
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + b"X-Slow: " + b"." * 10_000
        try:
            conn.settimeout(self.drip)
            try:
                conn.recv(65536)  # the request (what is not read here stays in the buffer)
            except OSError:
                pass
            for byte in answer:
                if self._stop.is_set() or time.monotonic() - began > self.hold:
                    break
                conn.sendall(bytes([byte]))
                time.sleep(self.drip)
        except OSError:  # the client gave up: what we are measuring
            pass
        finally:
            self.held.append(time.monotonic() - began)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def fmt(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    return f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"


def _expiry_latencies(stack: "Stack", api: Api, name: str, count: int, ttl: int = 1) -> list[float]:
    """Start `count` sessions with a `ttl`-second lease and never touch them again; for each,
    seconds from its lease running out to it being expired (by the sweep on `lifecycle`)."""
    ids = [api.ok("POST", "/api/v1/sessions/", {"bundle": name, "ttl_seconds": ttl})["id"] for _ in range(count)]
    timeout = time.monotonic() + 30
    pending = set(ids)
    while pending and time.monotonic() < timeout:
        rows = stack.sql(
            "SELECT id::text, EXTRACT(EPOCH FROM (now() - expires_at)) FROM sessions_app_session "
            "WHERE id = ANY(%s::uuid[]) AND status = 'expired' AND ended_at IS NOT NULL",
            [list(pending)],
        )
        for session_id, _ in rows:
            pending.discard(session_id)
        time.sleep(0.1)
    rows = stack.sql(
        "SELECT EXTRACT(EPOCH FROM (ended_at - expires_at)) FROM sessions_app_session "
        "WHERE id = ANY(%s::uuid[]) AND status = 'expired'",
        [ids],
    )
    return [float(seconds) for (seconds,) in rows] + [99.0] * len(pending)


def _drain_latencies(api: Api, prefix: str, rounds: int) -> list[float]:
    """v1 draining with one session; end it and time until v1 is drained (by the drain task on
    `lifecycle`, or the sweep's backstop)."""
    took: list[float] = []
    for r in range(rounds):
        name = f"{prefix}-{r}"
        bundle_with_label(api, name)
        session = api.ok("POST", "/api/v1/sessions/", {"bundle": name})["id"]
        move_to_v2(api, name)
        began = time.monotonic()
        api.ok("POST", f"/api/v1/sessions/{session}/end/")
        deadline = began + 30
        while version_state(api, name, 1) != "drained" and time.monotonic() < deadline:
            time.sleep(0.05)
        took.append(time.monotonic() - began if version_state(api, name, 1) == "drained" else 99.0)
    return took


def _queue_length(stack: "Stack") -> int:
    import redis

    client = redis.Redis(port=stack.redis_port, socket_timeout=2)
    try:
        return int(client.llen("deliveries"))
    finally:
        client.close()


def tarpit(stack: "Stack", api: Api, *, sessions: int, drains: int, backlog: int) -> list[Row]:
    admin_key = stack.manage("create_api_key", "--name", "chaos-admin", "--role", "admin").strip().splitlines()[-1]
    admin = Api(stack.web_port, admin_key)
    deadline = int(stack.env.get("WEBHOOK_ATTEMPT_DEADLINE", "10"))
    interval = int(stack.env["SESSION_SWEEP_INTERVAL"])
    bundle_with_label(api, "tp-base")
    expiry_before = _expiry_latencies(stack, api, "tp-base", sessions)
    drain_before = _drain_latencies(api, "tp-before", drains)

    pit = Tarpit(drip=0.5)
    events = ["version.published", "label.moved", "version.draining", "version.drained", "session.expired"]
    endpoint = admin.ok("POST", "/api/v1/webhooks/", {"url": pit.url, "events": events})["id"]
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_queue_length(stack))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        bundle_with_label(api, "tp-during")
        for i in range(backlog):  # a backlog of deliveries for the tarpit: one per publish
            api.ok("POST", "/api/v1/bundles/tp-during/versions/", {"content": content(f"tp {i}"), "message": "tp"})
        time.sleep(2 * interval)  # the tarpit now holds what it can
        expiry_during = _expiry_latencies(stack, api, "tp-during", sessions)
        drain_during = _drain_latencies(api, "tp-during", drains)
        time.sleep(deadline + 2)  # at least one attempt ran into its deadline
        [(pending,)] = stack.sql("SELECT count(*) FROM webhooks_delivery WHERE status = 'pending'")
    finally:
        stop.set()
        sampler.join(5)
        admin.ok("DELETE", f"/api/v1/webhooks/{endpoint}/", expect=(204,))
        pit.close()
        admin.close()

    def bound(before: list[float]) -> float:
        base = max(before) if before else 0.0
        return max(2 * base, base + 2 * interval)

    expiry_ok = max(expiry_during) <= bound(expiry_before)
    drain_ok = max(drain_during) <= bound(drain_before)
    held = max(pit.held, default=0.0)
    peak = max(samples, default=0)
    return [
        ("webhook tarpit", "lapsed-session expiry latency, no webhooks", fmt(expiry_before), None),
        (
            "webhook tarpit",
            "lapsed-session expiry latency, tarpit",
            f"{fmt(expiry_during)} (bound {bound(expiry_before):.1f} s)",
            expiry_ok,
        ),
        ("webhook tarpit", "drain latency, no webhooks", fmt(drain_before), None),
        (
            "webhook tarpit",
            "drain latency, tarpit",
            f"{fmt(drain_during)} (bound {bound(drain_before):.1f} s)",
            drain_ok,
        ),
        (
            "webhook tarpit",
            "deliveries queue length: peak",
            f"{peak} ({len(samples)} samples); {pending} deliveries waiting in the table",
            peak <= 50,
        ),
        (
            "webhook tarpit",
            "longest attempt held by the tarpit",
            f"{held:.1f} s (deadline {deadline} s; {pit.accepted} connections)",
            0 < held <= deadline + 2,
        ),
    ]
