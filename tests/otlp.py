"""A small OTLP/HTTP trace receiver on loopback: what the registry's exporter (the real one,
opentelemetry-exporter-otlp-proto-http) sends to a tracing backend, decoded with the OTLP
protobuf definitions (opentelemetry-proto). Tests point OTEL_EXPORTER_OTLP_ENDPOINT at it."""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    attributes: dict[str, Any]
    service: str
    links: list[tuple[str, str]] = field(default_factory=list)
    raw: bytes = b""  # the span's protobuf bytes, for searching


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.payloads: list[bytes] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    receiver.add(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                else:
                    answer = b""
                    self.send_response(404)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "OtlpReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        Span(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            service=str(resource.get("service.name", "")),
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                            raw=span.SerializeToString(),
                        )
                    )
        with self.lock:
            self.payloads.append(body)
            self.spans.extend(spans)

    def wait_for(self, predicate: Callable[[Span], bool], *, count: int = 1, timeout: float = 20) -> list[Span]:
        """The received spans that match, once there are `count` of them (fails after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = [span for span in self.spans if predicate(span)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                names = sorted({span.name for span in self.spans})
                raise AssertionError(f"{len(found)} of {count} matching spans after {timeout} s; received: {names}")
            time.sleep(0.05)
