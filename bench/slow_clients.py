"""Slow clients against a running server: hold N connections that each announce a 100-byte
request body and send 10 bytes of it, and meanwhile measure /healthz latency from one more
client. Prints p50, p99 and the maximum, with and without the slow connections.

    python bench/slow_clients.py --url http://127.0.0.1:8000 --clients 20 --seconds 5

`make bench` runs it against the server it measures (issue 10: five such connections held all
four gunicorn sync workers for 30 s; with the ASGI front they hold coroutines, see
edge/dispatch.py)."""

import argparse
import socket
import statistics
import sys
import time
import urllib.request
from urllib.parse import urlsplit


def healthz_latencies(url: str, seconds: float) -> list[float]:
    """Sequential GET /healthz for `seconds`; latencies in milliseconds (a failure counts as
    the time it took, and is reported by the caller through the maximum)."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=35) as response:
                response.read()
        except OSError:
            pass
        out.append((time.perf_counter() - started) * 1000)
    return out


def hold_slow_connections(url: str, clients: int) -> list[socket.socket]:
    parts = urlsplit(url)
    held = []
    for _ in range(clients):
        s = socket.create_connection((parts.hostname, parts.port or 80), timeout=5)
        s.sendall(
            f"POST /api/v1/sessions/ HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n".encode()
            + b'{"bundle":'
        )
        held.append(s)
    return held


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"requests": len(ordered), "p50_ms": statistics.median(ordered), "p99_ms": p99, "max_ms": ordered[-1]}


def measure(url: str, *, clients: int, seconds: float) -> dict[str, dict[str, float]]:
    baseline = summary(healthz_latencies(url, seconds))
    held = hold_slow_connections(url, clients)
    try:
        loaded = summary(healthz_latencies(url, seconds))
    finally:
        for s in held:
            s.close()
    return {"without": baseline, "with": loaded}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--clients", type=int, default=20, help="slow connections held (default 20)")
    parser.add_argument("--seconds", type=float, default=5, help="measuring time, each phase (default 5)")
    ns = parser.parse_args()
    figures = measure(ns.url.rstrip("/"), clients=ns.clients, seconds=ns.seconds)
    for phase, f in figures.items():
        print(
            f"/healthz {phase} {ns.clients} slow clients: {f['requests']:.0f} requests, p50 {f['p50_ms']:.1f} ms,"
            f" p99 {f['p99_ms']:.1f} ms, max {f['max_ms']:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
