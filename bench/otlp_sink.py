"""An OTLP/HTTP sink for measuring the cost of tracing: answers every POST /v1/traces with 200
and counts what arrived (it decodes nothing, so it costs the machine little). For the figures in
docs/operations.md (traces):

    .venv/bin/python bench/otlp_sink.py --port 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 make bench-short

Stop it with Ctrl-C (or SIGTERM); it prints the requests and bytes it received."""

import argparse
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

received = {"requests": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        received["requests"] += 1
        received["bytes"] += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=4318)
    ns = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", ns.port), Sink)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        print(f"otlp sink: {received['requests']} export requests, {received['bytes']} bytes", flush=True)


if __name__ == "__main__":
    main()
