"""One webhook attempt's HTTP connection: to the address that was checked, within one deadline.

- Pinned: the URL's host is resolved once (core.urlcheck.resolve), every address checked,
  and the connection goes to the first of them. httpx would resolve the name again when it
  connects, leaving a window in which DNS could answer differently (DNS rebinding: a public
  address for the check, 127.0.0.1 for the connect). The request keeps the URL, so the Host
  header and the TLS server name (SNI, and the certificate check) are the URL's host.
- Deadline: httpx's timeouts are per phase (connect, each read, each write), so a receiver that
  trickles its status line one byte every few seconds holds an attempt for ever. Every socket
  operation here waits at most what is left of the attempt's wall-clock deadline, and fails
  once it has passed.

No proxy from the environment (trust_env off): a proxy would connect to the host itself."""

import ssl
import time
import typing

import httpcore
import httpx

from core.urlcheck import Resolved


class DeadlineExceeded(httpcore.TimeoutException):
    pass


class _Clock:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # time.monotonic() value

    def left(self, timeout: float | None) -> float:
        """The timeout for the next socket operation: what the phase allows, capped by what is
        left of the attempt. Raises once nothing is left."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("the attempt's deadline passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, clock: _Clock) -> None:
        self._stream, self._clock = stream, clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._clock.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._clock.left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, self._clock.left(timeout)), self._clock)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    def __init__(self, resolved: Resolved, clock: _Clock) -> None:
        self._resolved, self._clock = resolved, clock
        self._backend = httpcore.SyncBackend()
        self.connected_to: str | None = None

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        # One transport serves one request to one URL (redirects are not followed), so `host`
        # is the URL's: connect to the address checked for it instead of resolving it again.
        if port != self._resolved.port:
            raise httpcore.ConnectError(f"refusing to connect to port {port}, not the checked URL's")
        address = str(self._resolved.addresses[0])
        stream = self._backend.connect_tcp(address, port, self._clock.left(timeout), local_address, socket_options)
        self.connected_to = address
        return _Stream(stream, self._clock)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class PinnedTransport(httpx.HTTPTransport):
    """An httpx transport for one request to `resolved`, connecting to its checked address,
    every socket operation bounded by `deadline` (a time.monotonic() value)."""

    def __init__(self, resolved: Resolved, *, deadline: float) -> None:
        super().__init__(trust_env=False, retries=0)
        self.backend = _PinnedBackend(resolved, _Clock(deadline))
        # httpx builds its httpcore pool with no way to pass a network backend: replace it with
        # one on ours, with httpx's own SSL context (certifi, verification on).
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=1,
            retries=0,
            network_backend=self.backend,
        )
