"""A database that is gone or stops answering costs a request seconds, not minutes: the connect
timeout, and the check config.postgres makes on a wait that lasts (docs/reliability.md). The
server here is the suite's real PostgreSQL behind a TCP relay that can freeze: it then holds
every byte in both directions and completes no new connection, as a SIGSTOPped server does
(its kernel still accepts and acknowledges)."""

import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connections

pytestmark = pytest.mark.django_db


class Relay:
    """127.0.0.1:port -> the test database's server, with freeze() and thaw()."""

    def __init__(self, upstream: tuple[int, Any]) -> None:
        self.upstream = upstream  # (family, address)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.frozen = threading.Event()
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.server.settimeout(0.1)
        while not self.stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            self.sockets.append(client)
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            self._relay(client)
        except (OSError, ValueError):  # closed under it by close()
            client.close()

    def _relay(self, client: socket.socket) -> None:
        while self.frozen.is_set() and not self.stop.is_set():  # accepted, never answered
            time.sleep(0.05)
        family, address = self.upstream
        server = socket.socket(family, socket.SOCK_STREAM)
        server.connect(address)
        self.sockets.append(server)
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as sel:
            for s in peers:
                sel.register(s, selectors.EVENT_READ)
            while not self.stop.is_set():
                if self.frozen.is_set():
                    time.sleep(0.05)
                    continue
                for key, _ in sel.select(0.05):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if not data:
                        for s in peers:
                            s.close()
                        return
                    peers[key.fileobj].sendall(data)  # type: ignore[index]

    def close(self) -> None:
        self.stop.set()
        self.server.close()
        for s in self.sockets:
            s.close()


def _upstream() -> tuple[int, Any]:
    settings = connections["default"].settings_dict
    host, port = settings["HOST"] or "/tmp", int(settings["PORT"] or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


@pytest.fixture
def relay() -> Iterator[Relay]:
    relay = Relay(_upstream())
    yield relay
    relay.close()


def _wrapper(port: int, alias: str):
    """A second connection to the test database, configured as settings configure `default`."""
    settings = {**connections["default"].settings_dict, "HOST": "127.0.0.1", "PORT": str(port)}
    conn = connections["default"].__class__(settings, alias)
    conn.inc_thread_sharing()  # used from the threads of _within
    return conn


def _within(seconds: float, work) -> tuple[float, BaseException | None]:
    """Run work() on a thread; (seconds it took, what it raised). Fails if it takes longer."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            work()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001  (reported to the test)
            outcome.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting for the database after {seconds} s"
    return time.monotonic() - began, outcome[0]


def _select_one(conn) -> None:
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_server_that_never_answers_a_new_connection_fails_it_within_the_connect_timeout(relay):
    relay.frozen.set()
    conn = _wrapper(relay.port, "frozen-connect")
    took, error = _within(10, lambda: _select_one(conn))
    conn.close()
    assert isinstance(error, OperationalError) and took < 4, (took, error)


def test_a_statement_on_a_server_that_stops_answering_fails_within_seconds_and_recovers(relay):
    conn = _wrapper(relay.port, "frozen-statement")
    _select_one(conn)
    relay.frozen.set()
    took, error = _within(10, lambda: _select_one(conn))
    assert isinstance(error, OperationalError), error
    assert took < 5, took  # a stall check after 1 s, whose new connection times out after 2 s
    assert conn.connection is None or conn.connection.closed  # never reused
    other = _wrapper(relay.port, "frozen-other")
    took, error = _within(10, lambda: _select_one(other))
    assert isinstance(error, OperationalError) and took < 0.5, "known down: no second connect timeout"
    relay.frozen.clear()
    conn.close()

    def until_it_answers() -> None:
        while True:
            try:
                return _select_one(conn)
            except OperationalError:
                conn.close()
                time.sleep(0.05)

    took, error = _within(10, until_it_answers)
    assert error is None and took < 2, (took, error)
    conn.close()
    other.close()


def test_a_slow_statement_on_a_server_that_answers_is_left_alone(relay):
    conn = _wrapper(relay.port, "slow-statement")

    def slow() -> None:
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2.5), 1")
            assert cursor.fetchone()[1] == 1

    took, error = _within(15, slow)
    conn.close()
    assert error is None and took >= 2.5, (took, error)
