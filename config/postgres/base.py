"""Django's PostgreSQL backend, with a client-side bound on waiting for a server that stopped
answering (settings: DATABASES["default"]["ENGINE"] = "config.postgres").

libpq's connect timeout, TCP keepalives and `tcp_user_timeout` (set in config.settings) catch a
server that is gone or unreachable: the peer's kernel stops acknowledging. They do not catch a
server that is there but does not answer (its processes frozen, SIGSTOP, a stuck host under
memory pressure): the kernel acknowledges every byte, so a statement waits for its result for
ever, and `statement_timeout`, which the server applies, never fires. Each web thread would then
hang, and with it every request queued behind the threads (the fast lane shares them).

So every wait for the server on a connection (a statement, a commit, a fetch; psycopg funnels
them all through Connection.wait) is watched: once it has lasted DB_STALL_CHECK_MS, the process
checks that the server still answers (its postmaster answers an SSLRequest within a second,
or, where the conninfo names no host, a new connection opens within DB_CONNECT_TIMEOUT; one
check at a time per server, its verdict shared for a moment by every waiting thread). If
it does not, the connection is closed and the statement fails with OperationalError, which
the API answers as 503 `unavailable`. A slow statement on a server that answers is left alone
(the server's `statement_timeout` applies; some commands turn it off for a long statement), and
checked again after 2, 4, 8 and then every 10 seconds."""

import socket
import struct
import threading
import time
from collections.abc import Generator
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

MAX_CHECK_INTERVAL = 10.0  # seconds between checks while one wait goes on
# The check asks the postmaster to answer an SSLRequest (one byte back, 'S' or 'N'), which it
# does before any authentication, even with every connection slot taken. libpq will not wait
# less than 2 s for a connection; this probe needs no more than a second, so a request that
# meets a frozen server twice (its statement, then a new connection) still fails within 5 s.
PROBE_TIMEOUT = 1.0
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


def _probe(conninfo: str) -> bool | None:
    """Whether the server's postmaster answers within PROBE_TIMEOUT; None when the conninfo
    does not say where it listens (the caller then opens a real connection)."""
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or "").split(",")[0]
    port = int(str(params.get("port") or "5432").split(",")[0])
    if not host:
        return None
    address: str | tuple[str, int]
    if host.startswith("/"):
        family, address = socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    else:
        family, address = socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port)
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(PROBE_TIMEOUT)
            sock.connect(address)
            sock.sendall(_SSL_REQUEST)
            return len(sock.recv(1)) == 1
    except socket.gaierror:
        return None  # a name this probe cannot resolve quickly: let libpq decide
    except OSError:  # timed out, refused, reset: not answering
        return False


# Connect keyword arguments of psycopg that are not libpq connection parameters.
_NOT_CONNINFO = {"autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"}


class _ServerCheck:
    """Whether a server answers a new connection, checked by one thread at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked_at = -1e9
        self.answers = True

    def answering(self, conninfo: str, *, fresh_for: float, connect_timeout: int) -> bool:
        with self.lock:  # the others wait for this verdict instead of opening connections too
            if time.monotonic() - self.checked_at < fresh_for:
                return self.answers
            probed = _probe(conninfo)
            if probed is not None:
                self.answers = probed
            else:
                try:
                    psycopg.connect(conninfo, connect_timeout=connect_timeout, autocommit=True).close()
                    self.answers = True
                except errors.ConnectionTimeout:
                    self.answers = False
                except psycopg.OperationalError as exc:
                    # An error the server sent (too many clients, authentication) means it
                    # answers; a refused or reset connection means it is gone.
                    self.answers = exc.sqlstate is not None
            self.checked_at = time.monotonic()
            return self.answers

    def known_down(self, *, fresh_for: float) -> bool:
        """The last check (or connection attempt) found the server not answering, lately."""
        return not self.answers and time.monotonic() - self.checked_at < fresh_for

    def record(self, answers: bool) -> None:
        """What a connection attempt found."""
        with self.lock:
            self.answers, self.checked_at = answers, time.monotonic()


_checks: dict[str, _ServerCheck] = {}
_checks_lock = threading.Lock()


def _check_for(conninfo: str) -> _ServerCheck:
    with _checks_lock:
        return _checks.setdefault(conninfo, _ServerCheck())


class WatchedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits for the server are watched (see the module docstring)."""

    stall_check: float = 1.0  # seconds a wait lasts before the process checks the server answers
    connect_timeout: int = 2  # of that check's new connection
    conninfo_for_check: str = ""  # empty: never checked

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        return super().wait(self._watched(gen), interval=interval, timeout=timeout)

    def _watched(self, gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """`gen`, passed through; on the waiter's idle ticks (READY_NONE every `interval`) it
        checks how long this wait has lasted and, past `stall_check`, whether the server answers."""
        began = time.monotonic()
        every = self.stall_check
        next_check = began + every
        try:
            state = next(gen)
            while True:
                ready = yield state
                if not ready:
                    now = time.monotonic()
                    if now >= next_check:
                        if not self._server_answers():
                            self.pgconn.finish()  # its protocol state is unknown: never reused
                            raise errors.OperationalError(
                                f"the database did not answer for {time.monotonic() - began:.1f} s: connection closed"
                            )
                        every = min(every * 2, MAX_CHECK_INTERVAL)  # a long statement on a live server
                        next_check = time.monotonic() + every
                state = gen.send(ready)
        except StopIteration as stop:
            return stop.value

    def _server_answers(self) -> bool:
        if not self.conninfo_for_check:
            return True
        return _check_for(self.conninfo_for_check).answering(
            self.conninfo_for_check, fresh_for=self.stall_check / 2, connect_timeout=self.connect_timeout
        )


class _Driver:
    """What the backend calls `Database`: psycopg, but connecting with WatchedConnection."""

    def __getattr__(self, name: str) -> Any:
        return getattr(psycopg, name)

    @staticmethod
    def connect(*args: Any, **kwargs: Any) -> Any:
        # Looked up at each call, not once at import: tracing (config.telemetry) may wrap
        # psycopg's Connection.connect after this module was imported.
        return WatchedConnection.connect(*args, **kwargs)


class DatabaseWrapper(base.DatabaseWrapper):
    """settings_dict["WATCH"]: {"stall_check": seconds}; without it (or with None) waits are
    not watched."""

    Database = _Driver()  # type: ignore[assignment]  # psycopg, connecting with WatchedConnection

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        watch = self.settings_dict.get("WATCH") or {}
        stall_check = watch.get("stall_check")
        if stall_check is None:
            return super().get_new_connection(conn_params)
        params = {k: v for k, v in conn_params.items() if k not in _NOT_CONNINFO and v is not None}
        conninfo = make_conninfo("", **params)
        check = _check_for(conninfo)
        # While the server is known not to answer (this process found so within the last
        # half stall_check), a new connection fails at once instead of paying the connect
        # timeout again: one request may otherwise pay it on each of its paths (a fast-lane
        # batch, its one-by-one retry, Django). After that, an attempt finds out afresh.
        if check.known_down(fresh_for=stall_check / 2):
            raise errors.OperationalError("the database did not answer a moment ago; try again shortly")
        try:
            conn = super().get_new_connection(conn_params)
        except errors.ConnectionTimeout:
            check.record(False)
            raise
        check.record(True)
        if isinstance(conn, WatchedConnection):
            conn.stall_check = stall_check
            conn.connect_timeout = int(conn_params.get("connect_timeout") or 2)
            conn.conninfo_for_check = conninfo
        return conn
