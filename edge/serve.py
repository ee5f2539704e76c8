"""The web server, started the same way by `make run`, the image, compose and the benchmark:

    python -m edge.serve [--host 0.0.0.0] [--port 8000] [--workers N] [--access-log]

It execs granian serving the ASGI application `config.asgi:application` (why granian, and the
measurements behind it: docs/performance.md). Worker processes default to WEB_CONCURRENCY
(else 2: one per core of the machine it was measured on); the Django and fast-lane threads per
worker come from settings.WEB_THREADS."""

import argparse
import os
import sys

APP = "config.asgi:application"
# Headers must arrive within this many milliseconds (also the idle keep-alive limit): a client
# that trickles its request line or headers is cut off by the server, before any Python runs.
HEADER_READ_TIMEOUT_MS = 5000


def command(*, host: str, port: int, workers: int, access_log: bool) -> list[str]:
    """granian's command line; the benchmark serves its bare baseline app with the same flags."""
    return [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-ws",
        "--loop",
        "uvloop",
        "--http",
        "1",
        "--http1-header-read-timeout",
        str(HEADER_READ_TIMEOUT_MS),
        "--respawn-failed-workers",  # also what restarts a worker its watchdog stopped (edge.watchdog)
        "--respawn-interval",
        "1",
        "--workers-kill-timeout",
        "20",
        "--log-level",
        "warning",
        "--access-log" if access_log else "--no-access-log",
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m edge.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")))
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--app", default=APP, help=argparse.SUPPRESS)  # the benchmark's bare app
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    ns = parse_args(argv)
    argv_out = [*command(host=ns.host, port=ns.port, workers=ns.workers, access_log=ns.access_log), ns.app]
    os.execv(argv_out[0], argv_out)


if __name__ == "__main__":
    main()
