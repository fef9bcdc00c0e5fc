"""``HttpSession``: one keep-alive HTTP/1.1 connection to a broker's HTTP protocol.

Built on the stdlib's ``http.client``: one request at a time, the connection reused between
requests. Before a connection is reused it is checked for the broker's close (its idle
timeout or a restart: the socket reads as ready), and replaced. A request that still fails
on a reused connection is sent again once on a new one when the failure came while sending
it (the broker had closed the connection, so it read nothing) or, for a get or offset, at
any point; a put whose answer was lost is not sent again (it may have been stored): the
failure is raised.

Errors are the TCP client's: a timeout raises ``OperationTimeoutError``; a connection
failure ``ClientError``. Not thread-safe: one session per thread.
"""

from __future__ import annotations

import http.client
import socket
from typing import NamedTuple
from urllib.parse import urlencode

from meta.client.net.connection import readable_within
from meta.errors import ClientError, OperationTimeoutError

_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HttpReply(NamedTuple):
    """A broker's answer: the status, the ``X-Meta-Offset`` header of a 301, and the body."""

    status: int
    moved_offset: str | None
    body: bytes


class HttpSession:
    """A keep-alive connection to ``host:port`` (a broker's HTTP port or a load balancer).

    Args:
        host: the broker's (or the balancer's) host.
        port: its HTTP port.
        broker_id: the ``/<brokerId>`` path segment a balancer routes on.
        timeout_s: bound on connecting and on each request.
    """

    def __init__(self, host: str, port: int, broker_id: int = 0, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def request(
        self, method: str, route: str, params: dict[str, object], body: bytes | None = None
    ) -> HttpReply:
        """Send one request to ``/<route>/<brokerId>?<params>``; return the answer.

        Raises:
            OperationTimeoutError: no answer within ``timeout_s``.
            ClientError: the connection failed.
        """
        path = f"/{route}/{self.broker_id}?{urlencode(params)}"
        if self._connection is not None and _closed_by_peer(self._connection):
            self.close()
        reused = self._connection is not None
        progress = {"sent": False}
        try:
            return self._exchange(method, path, body, progress)
        except _DROPPED as error:
            self.close()
            if not reused or (body is not None and progress["sent"]):
                raise ClientError(f"HTTP {method} {path} failed: {error!r}") from error
        try:
            return self._exchange(method, path, body, progress)  # once, on a new connection
        except _DROPPED as error:
            self.close()
            raise ClientError(f"HTTP {method} {path} failed: {error!r}") from error

    def _exchange(
        self, method: str, path: str, body: bytes | None, progress: dict[str, bool]
    ) -> HttpReply:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(self.host, self.port, self.timeout_s)
        connection = self._connection
        progress["sent"] = False
        try:
            connection.request(method, path, body)
            progress["sent"] = True
            response = connection.getresponse()
            data = response.read()
        except TimeoutError as error:
            self.close()
            raise OperationTimeoutError(f"HTTP {method} {path}: no answer in time") from error
        except _DROPPED:
            raise
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise ClientError(f"HTTP {method} {path} failed: {error!r}") from error
        if response.will_close:
            self.close()
        return HttpReply(response.status, response.getheader("X-Meta-Offset"), data)

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> HttpSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection's socket reads as ready: the peer closed it (or sent
    something unasked, which makes it unusable too)."""
    sock = connection.sock
    if sock is None:
        return True
    return readable_within(sock, 0.0)


assert socket.timeout is TimeoutError  # Python >= 3.10: a socket timeout is a TimeoutError
