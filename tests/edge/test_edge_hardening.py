"""The edges a hostile client reaches before any key is checked, against a real server process
(python -m edge.serve) where the server's own parsing matters, and in process where
statements are counted:

- Prometheus label values never come from client input: random methods, paths, bundle names
  and keys add no series to /metrics (through Django and the fast lane);
- only the exact `X-Forwarded-For` header is read (`X_Forwarded_For` forges nothing);
- a key that is not working costs one lookup on every lane, and a client address that keeps
  sending such keys gets 429 (AUTH_FAILURE_RATE);
- the admin login is limited per user name as well as per address;
- /readyz shows what failed to loopback clients and metrics-token holders only;
- a Content-Length the server cannot parse is answered in the API's error shape by the proxy in
  front (real nginx on loopback, deploy/nginx.conf)."""

import asyncio
import http.client
import ipaddress
import json
import os
import random
import re
import secrets
import socket
import ssl
import string
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from access.models import Role
from audit.models import AuditEvent
from edge.django_lane import shutdown_pool
from mcp_server.server import close_pool_connections
from registry.services import bundle_create, label_move, version_publish
from sessions_app.services import session_start
from tests.conftest import content, make_api
from tests.live import WebServer, asgi_scope, free_port

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker) -> Iterator[WebServer]:
    """One real server behind one (imaginary) proxy: the client address is the last entry of
    X-Forwarded-For, or the peer's when there is none (the tests speak from loopback)."""
    # Budgets out of the way: a thousand requests of one key must not reach 429 (a new status).
    web = WebServer(
        env={"DJANGO_TRUSTED_PROXY_HOPS": "1", "API_THROTTLE_READ": "100000/m", "API_THROTTLE_WRITE": "100000/m"}
    )
    web.start()
    try:
        yield web
    finally:
        web.stop()


@pytest.fixture(autouse=True)
def _close_pool_connections():
    yield
    shutdown_pool()  # the in-process lanes' pool threads hold connections to the test database
    close_pool_connections()  # and MCP's


def _request(
    server: WebServer, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


class Keepalive:
    """Many requests on one connection (reopened when the server closes it)."""

    def __init__(self, server: WebServer) -> None:
        self.server = server
        self.conn: http.client.HTTPConnection | None = None

    def send(self, method: str, path: str, headers: dict[str, str]) -> int:
        for _ in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
            try:
                self.conn.putrequest(method, path, skip_accept_encoding=True)
                for name, value in headers.items():
                    self.conn.putheader(name, value)
                self.conn.endheaders()
                response = self.conn.getresponse()
                response.read()
                if response.getheader("connection", "").lower() == "close":
                    self.close()
                return response.status
            except (http.client.HTTPException, OSError):
                self.close()
        raise AssertionError(f"no answer to {method} {path}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _series(server: WebServer) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    status, _, body = _request(server, "GET", "/metrics")
    assert status == 200, body
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def _random_method(rng: random.Random) -> str:
    tchar = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
    return "".join(rng.choices(tchar, k=rng.choice([3, 7, 12, 40, 200])))


def _random_name(rng: random.Random) -> str:
    """A name that could be a bundle's (so that each is a plain 404)."""
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choices(string.ascii_lowercase + string.digits + "-", k=rng.randint(0, 40))
    )


def _hostile(rng: random.Random, *, key: str, session: str, methods: int, each: int) -> list[tuple[str, str, str]]:
    """(method, path, Authorization) of hostile requests: random methods on Django's and the
    fast lane's paths, random paths, random bundle names (404), random keys and session ids."""
    auth = f"Bearer {key}"
    lanes = [
        "/api/v1/bundles/",
        "/api/v1/catalog/",
        "/healthz",
        "/admin/login/",
        "/api/v1/sessions/",  # the fast lane's start
        f"/api/v1/sessions/{session}/bundle/",  # the fast lane's fetch
        f"/api/v1/sessions/{session}/heartbeat/",
        "/mcp",
    ]
    out = [(_random_method(rng), lanes[n % len(lanes)], auth) for n in range(methods)]
    for _ in range(each):
        segments = "/".join(_random_name(rng) for _ in range(rng.randint(1, 4)))
        out.append(("GET", rng.choice(["/", "/api/v2/", "/api/v1/sessions/", "/static/", "/x/"]) + segments, auth))
        out.append(("GET", f"/api/v1/bundles/{_random_name(rng)}/", auth))
        out.append(("GET", f"/api/v1/bundles/{_random_name(rng)}/versions/", auth))
        out.append(("GET", f"/api/v1/sessions/{uuid.UUID(int=rng.getrandbits(128))}/bundle/", auth))
        out.append(("POST", f"/api/v1/sessions/{uuid.UUID(int=rng.getrandbits(128))}/heartbeat/", auth))
        fake = "pr_" + "".join(rng.choices(string.ascii_letters + string.digits, k=43))
        out.append(("GET", f"/api/v1/sessions/{session}/bundle/", f"Bearer {fake}"))
        out.append(("GET", "/api/v1/bundles/", f"Bearer {fake}"))
    return out


def test_hostile_methods_paths_names_and_keys_add_no_metric_series(server):
    """Every series a hostile request can produce exists after a few of each kind; a thousand
    random methods and a few hundred random paths, bundle names, session ids and keys after
    them add none (today each random method adds a series per route and status)."""
    agent = make_api(Role.AGENT, name="cardinality-agent")
    ops = make_api(Role.OPS, name="cardinality-ops")
    bundle = bundle_create(name="cardinality", description="d", actor=ops.actor)
    v1 = version_publish(bundle=bundle, content=content(), message="v1", actor=ops.actor).version
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="r")
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    rng = random.Random(18)
    client = Keepalive(server)
    try:
        for method, path, auth in _hostile(rng, key=agent.secret, session=str(session.pk), methods=40, each=5):
            client.send(method, path, {"Host": "127.0.0.1", "Authorization": auth})
        _series(server)  # the scrape's own series
        before = _series(server)
        hostile = _hostile(rng, key=agent.secret, session=str(session.pk), methods=1000, each=60)
        statuses = [client.send(m, p, {"Host": "127.0.0.1", "Authorization": a}) for m, p, a in hostile]
    finally:
        client.close()
    assert max(statuses) < 500
    added = _series(server) - before
    assert not added, sorted(added)[:10]
    methods = {dict(labels).get("method") for name, labels in before if name == "registry_http_requests_total"}
    assert "other" in methods and methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}


# --- X-Forwarded-For ------------------------------------------------------------------------


def test_only_the_exact_forwarded_for_header_names_the_client(server):
    """Behind one trusted hop the client is the last X-Forwarded-For entry. `X_Forwarded_For`
    is another header (underscores are not dashes): it must not be merged in, or a client could
    name itself 127.0.0.1 (the /metrics gate) or anyone (the audit log, the login limit)."""
    forged = {"X-Forwarded-For": "203.0.113.9", "X_Forwarded_For": "127.0.0.1"}
    assert _request(server, "GET", "/metrics", forged)[0] == 401
    assert _request(server, "GET", "/metrics", {"X_Forwarded_For": "127.0.0.1"})[0] == 200  # the peer is loopback
    assert _request(server, "GET", "/metrics", {"X-Forwarded-For": "203.0.113.9"})[0] == 401
    assert _request(server, "GET", "/metrics", {"X-Forwarded-For": "127.0.0.1"})[0] == 200  # what the proxy said

    ops = make_api(Role.OPS, name="forwarded-ops")
    body = json.dumps({"name": "forwarded", "description": "d"}).encode()
    headers = {"Authorization": f"Bearer {ops.secret}", "Content-Type": "application/json", **forged}
    status, _, answer = _request(server, "POST", "/api/v1/bundles/", headers, body)
    assert status == 201, answer
    event = AuditEvent.objects.get(action="bundle.created", target="forwarded")
    assert event.client_ip == "203.0.113.9"


# --- a key that is not working: one lookup, and a budget per address --------------------------


@pytest.fixture
def key_lookups(monkeypatch) -> list[str]:
    """Every statement that reads access_apikey, on any thread (Django's cursors, the fast
    lane's server-side-binding one, MCP's pool): psycopg's own execute, counted."""
    seen: list[str] = []
    real = psycopg.Cursor.execute

    def execute(self, query, *args: Any, **kwargs: Any):
        text = query if isinstance(query, str) else str(query)
        if "access_apikey" in text and text.lstrip().upper().startswith("SELECT"):
            seen.append(text)
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return seen


def _asgi(method: str, path: str, headers: dict[str, str], body: bytes = b"", client: str = "127.0.0.1"):
    """(status, headers, body) from the one ASGI application (dispatcher, fast lane, MCP, Django)."""
    from config.asgi import application

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(application(asgi_scope(method, path, headers, client), receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


FAKE = "pr_" + "x" * 43
MCP_CALL = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
LANES = [
    ("GET", f"/api/v1/sessions/{uuid.uuid4()}/bundle/", b"", {}),  # fast lane, batched
    ("POST", f"/api/v1/sessions/{uuid.uuid4()}/render/", b"", {}),  # fast lane, one by one
    ("POST", "/api/v1/sessions/", b'{"bundle": "refunds"}', {"Content-Type": "application/json"}),  # fast lane
    ("GET", "/api/v1/bundles/", b"", {}),  # Django (DRF)
    ("POST", "/mcp", MCP_CALL, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}),
]


@pytest.mark.parametrize(("method", "path", "body", "extra"), LANES, ids=["fetch", "render", "start", "drf", "mcp"])
def test_a_key_that_is_not_working_is_looked_up_once(method, path, body, extra, key_lookups):
    """Today the fast lane reads the key, reads it again one by one, and declines to Django,
    which reads it a third time."""
    status, headers, answer = _asgi(method, path, {"Authorization": f"Bearer {FAKE}", **extra}, body)
    assert status == 401, answer
    error = json.loads(answer)["error"]
    # /mcp answers a JSON-RPC request in JSON-RPC's shape, the contract's error as its data.
    assert (error["data"] if path == "/mcp" else error)["code"] == "not_authenticated"
    assert headers[b"www-authenticate"] == b'Bearer realm="api"'
    assert len(key_lookups) == 1, key_lookups


@pytest.mark.parametrize(("method", "path", "body", "extra"), LANES, ids=["fetch", "render", "start", "drf", "mcp"])
def test_every_lane_answers_with_the_request_id_and_the_security_headers(method, path, body, extra, db):
    """/mcp sent neither the request id nor the security and frame headers."""
    address = str(ipaddress.IPv6Address(secrets.randbits(128)))  # a failed-auth budget of its own
    _, drf_headers, _ = _asgi("GET", "/api/v1/bundles/", {}, client=address)
    security = {k: v for k, v in drf_headers.items() if k.startswith((b"x-frame", b"x-content", b"referrer", b"cross"))}
    assert len(security) >= 2, drf_headers  # what Django's middleware adds: the reference
    given = f"edge-{secrets.token_hex(4)}"
    status, headers, _ = _asgi(
        method, path, {"Authorization": f"Bearer {FAKE}", "X-Request-ID": given, **extra}, body, client=address
    )
    assert status == 401
    assert headers[b"x-request-id"] == given.encode()
    assert {k: headers.get(k) for k in security} == security


def test_mcp_counts_its_requests_as_every_lane_does(db):
    """/mcp was not counted in registry_http_requests_total (the other lanes' counts are tested
    in tests/metrics/test_metrics.py and tests/edge/test_fastlane.py)."""
    from metrics.instruments import REQUESTS

    def mcp_401s() -> float:
        return sum(
            v for labels, v in _request_counts(REQUESTS) if labels["route"] == "mcp" and labels["status"] == "401"
        )

    before = mcp_401s()
    address = str(ipaddress.IPv6Address(secrets.randbits(128)))
    method, path, body, extra = LANES[-1]
    assert _asgi(method, path, {"Authorization": f"Bearer {FAKE}", **extra}, body, client=address)[0] == 401
    assert mcp_401s() == before + 1


def _request_counts(counter):
    """(labels, value) of every `registry_http_requests_total`-like sample of the counter."""
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                yield sample.labels, sample.value


def test_an_address_that_keeps_sending_bad_keys_gets_429_and_a_working_key_still_works(settings, key_lookups):
    settings.AUTH_FAILURE_RATE = "4/m"
    agent = make_api(Role.AGENT, name="shares-the-address")
    address = str(ipaddress.IPv6Address(secrets.randbits(128)))  # its own counter, whatever ran before
    answers = [
        _asgi(method, path, {"Authorization": f"Bearer {FAKE}", **extra}, body, client=address)
        for method, path, body, extra in LANES + LANES[:2]
    ]
    statuses = [status for status, _, _ in answers]
    assert statuses == [401] * 4 + [429] * 3, statuses
    for _, headers, body in answers[4:]:
        doc = json.loads(body)
        error = doc["error"]
        if "jsonrpc" in doc:  # /mcp answers a JSON-RPC request in JSON-RPC's shape, the contract's error as data
            assert error["message"].startswith("throttled: ")
            error = error["data"]
        assert set(error) == {"code", "message", "details"} and error["code"] == "throttled"
        assert int(headers[b"retry-after"]) >= 1
    # A working key from the same address is not refused by the failed-auth budget.
    assert _asgi("GET", "/api/v1/bundles/", {"Authorization": f"Bearer {agent.secret}"}, client=address)[0] == 200
    # Another address has its own budget.
    assert _asgi("GET", "/api/v1/bundles/", {"Authorization": f"Bearer {FAKE}"}, client="192.0.2.44")[0] == 401


# --- the admin login: per address and per user name -------------------------------------------


def test_the_admin_login_is_limited_per_user_name_across_addresses(settings):
    settings.ADMIN_LOGIN_RATE = "100/m"
    settings.ADMIN_LOGIN_ACCOUNT_RATE = "3/m"
    name = f"admin-{secrets.token_hex(4)}"
    statuses = []
    for n in range(5):
        client = Client(REMOTE_ADDR=f"198.51.100.{n + 1}")  # a new address every time
        statuses.append(client.post("/admin/login/", {"username": name, "password": "guess"}).status_code)
    assert statuses == [200, 200, 200, 429, 429], statuses
    # The same name with other case or spaces is the same account; another name is not limited.
    client = Client(REMOTE_ADDR="198.51.100.99")
    assert client.post("/admin/login/", {"username": f" {name.upper()} ", "password": "x"}).status_code == 429
    assert client.post("/admin/login/", {"username": f"{name}-other", "password": "x"}).status_code == 200


# --- /readyz ------------------------------------------------------------------------------------


def test_readyz_shows_its_checks_to_loopback_and_token_holders_only(settings):
    settings.METRICS_TOKEN = ""
    outside = Client(REMOTE_ADDR="203.0.113.5").get("/readyz")
    assert outside.status_code == 200 and outside.json() == {"status": "ok"}
    inside = Client(REMOTE_ADDR="127.0.0.1").get("/readyz").json()
    assert inside["checks"] == {"database": "ok", "broker": "ok"}
    settings.METRICS_TOKEN = "scrape-me"
    assert "checks" in Client(REMOTE_ADDR="203.0.113.5").get("/readyz", HTTP_AUTHORIZATION="Bearer scrape-me").json()
    assert "checks" not in Client(REMOTE_ADDR="203.0.113.5").get("/readyz", HTTP_AUTHORIZATION="Bearer no").json()


def test_readyz_names_no_exception_to_outsiders_when_something_is_down(settings, monkeypatch):
    from config import urls

    settings.METRICS_TOKEN = ""

    def down(*args: Any, **kwargs: Any):
        raise ConnectionRefusedError("broker away")

    monkeypatch.setattr(urls.celery_app, "connection_for_write", down)
    outside = Client(REMOTE_ADDR="203.0.113.5").get("/readyz")
    assert outside.status_code == 503 and outside.json() == {"status": "unavailable"}
    inside = Client(REMOTE_ADDR="::1").get("/readyz")
    assert inside.status_code == 503 and inside.json()["checks"]["broker"] == "error: ConnectionRefusedError"


# --- a Content-Length nobody can parse, through the proxy -----------------------------------------

NGINX = "/usr/sbin/nginx"
HUGE = b"Content-Length: 99999999999999999999\r\n"


def _raw(port: int, data: bytes, tls: bool) -> bytes:
    sock: socket.socket = socket.create_connection(("127.0.0.1", port), timeout=5)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        sock = context.wrap_socket(sock)
    out = b""
    with sock:
        sock.sendall(data)
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (TimeoutError, ssl.SSLError, ConnectionResetError):
            pass
    return out


def _parsed(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


@pytest.fixture
def nginx(server, tmp_path) -> Iterator[tuple[int, int]]:
    """deploy/nginx.conf run by real nginx on loopback in front of the live server:
    (plain HTTP port, TLS port)."""
    if not os.access(NGINX, os.X_OK):
        pytest.skip("Debian's nginx is not installed (.ci/run installs it)")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test"]
        + ["-keyout", str(tmp_path / "privkey.pem"), "-out", str(tmp_path / "fullchain.pem")],
        check=True,
        capture_output=True,
    )
    plain, tls = free_port(), free_port()
    with open(os.path.join(ROOT, "deploy", "nginx.conf")) as f:
        site = f.read()
    # A template (the nginx image fills in ${HTTPS_PORT} at start): rendered as it would be.
    site = re.sub(r"\$\{HTTPS_PORT\}", str(tls), site)
    assert "${" not in site
    site = (
        site.replace("server web:8000;", f"server 127.0.0.1:{server.port};")
        .replace("/etc/nginx/tls", str(tmp_path))
        .replace("listen 80 default_server", f"listen 127.0.0.1:{plain} default_server")
        .replace("listen 443 ssl http2 default_server", f"listen 127.0.0.1:{tls} ssl http2 default_server")
    )
    assert f"127.0.0.1:{server.port}" in site and f":{plain} " in site and f":{tls} " in site
    (tmp_path / "site.conf").write_text(site)
    # One process (no workers as another user, who could not read pytest's tmp_path).
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\ndaemon off;\nmaster_process off;\nevents {{}}\n"
        f"http {{\n  include /etc/nginx/mime.types;\n  access_log off;\n  include {tmp_path}/site.conf;\n}}\n"
    )
    proc = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-e", "stderr", "-c", str(tmp_path / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", tls)) == 0:
                    break
            if proc.poll() is not None:
                pytest.fail(f"nginx exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
        yield plain, tls
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_content_length_nobody_can_parse_is_answered_in_the_error_shape_by_the_proxy(server, nginx):
    """The app's own server (granian) refuses it before any application code runs, with a bare
    400 and no body; behind the proxy, nginx refuses it first and answers the API's JSON."""
    plain, tls = nginx
    request = b"POST /api/v1/bundles/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + HUGE + b"\r\n"
    status, headers, body = _parsed(_raw(server.port, request, tls=False))
    assert status == 400 and body == b""  # what a client reaching the app server directly gets
    for port, over_tls, path in [(tls, True, b"/api/v1/bundles/"), (plain, False, b"/healthz")]:
        request = b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + HUGE + b"\r\n"
        status, headers, body = _parsed(_raw(port, request, tls=over_tls))
        assert status == 400, body
        assert headers["content-type"] == "application/json"
        error = json.loads(body)["error"]
        assert set(error) == {"code", "message", "details"} and error["code"] == "validation_error"
    # The proxy passes the app's own answers on unchanged (its error pages are only its own).
    ok = b"GET /api/v1/bundles/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    status, headers, body = _parsed(_raw(tls, ok, tls=True))
    assert status == 401 and json.loads(body)["error"]["code"] == "not_authenticated"
