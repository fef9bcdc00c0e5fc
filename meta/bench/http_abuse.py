"""Misbehaving clients of the HTTP protocol's port, and a legitimate one to time beside them.

What lives here (``meta.bench.abuse`` runs them as its ``http-*`` abuses; the integration
tests use them against real broker processes):

* ``HttpSlowloris``: connections that send a request line, then one header line every
  ``interval_s``, never ending the head; a connection the broker closes is opened again;
* ``HttpPipelined``: connections that each send ``requests`` pipelined gets in one write,
  read every response, and start again;
* ``HttpNonReaders``: connections that send pipelined 1 MiB gets forever and read nothing;
* ``http_request``: one request on a new connection (the legitimate client), with its
  status, or None when the broker refused or closed the connection.

The abusers run in threads of the calling process (``abuser.Abuse``); every socket has a
timeout and every loop ends with its abuse (``close``).
"""

from __future__ import annotations

import selectors
import socket
import threading

from meta.bench.abuser import SOCKET_TIMEOUT_S, Abuse, NonReaders

SLOW_LINE_INTERVAL_S = 2.0
PIPELINED_REQUESTS = 500
HEAD_BYTES_MAX = 64 * 1024


def get_request(topic: str, max_bytes: int) -> bytes:
    """A keep-alive ``/get`` of partition 0 from offset 0."""
    return (
        b"GET /get?topic=%s&partition=0&offset=0&group=abuse&maxsize=%d HTTP/1.1\r\n"
        b"Host: broker\r\n\r\n" % (topic.encode(), max_bytes)
    )


def offset_request(topic: str) -> bytes:
    """A ``/offset`` of partition 0 that closes the connection after its answer."""
    return (
        b"GET /offset?topic=%s&partition=0&offset=0 HTTP/1.1\r\nHost: broker\r\n"
        b"Connection: close\r\n\r\n" % topic.encode()
    )


def read_response(reader) -> int:
    """Read one whole response (``Content-Length`` body) from a buffered reader; its status.

    Raises:
        ConnectionError: the connection closed first.
    """
    status_line = reader.readline(HEAD_BYTES_MAX)
    if not status_line.endswith(b"\r\n"):
        raise ConnectionError("the broker closed the connection")
    length = 0
    while True:
        line = reader.readline(HEAD_BYTES_MAX)
        if not line.endswith(b"\r\n"):
            raise ConnectionError("the broker closed the connection")
        if line == b"\r\n":
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if len(reader.read(length)) != length:
        raise ConnectionError("the broker closed the connection")
    return int(status_line.split()[1])


def response_bytes(sock: socket.socket) -> int:
    """Read one whole response (``Content-Length`` body) from ``sock``; its size in bytes
    (nothing after it may have been sent yet).

    Raises:
        ConnectionError: the connection closed first.
    """
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(HEAD_BYTES_MAX)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(HEAD_BYTES_MAX)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        body += chunk
    return len(head) + 4 + length


def http_request(address: tuple[str, int], request: bytes, timeout_s: float) -> int | None:
    """Send ``request`` on a new connection and read its response; its status, or None
    when the connection was refused, reset or closed before a response."""
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            sock.sendall(request)
            with sock.makefile("rb") as reader:
                return read_response(reader)
    except (ConnectionError, TimeoutError, OSError):
        return None


class HttpSlowloris(Abuse):
    """``connections`` connections each sending a request line and then a header line every
    ``interval_s``, never the blank line that ends the head.

    Attributes:
        reopened: connections opened again after the broker closed (or refused) one.
    """

    def __init__(
        self,
        address: tuple[str, int],
        connections: int,
        interval_s: float = SLOW_LINE_INTERVAL_S,
    ) -> None:
        super().__init__()
        self._address = address
        self._interval_s = interval_s
        self.reopened = 0
        self._slots: list[socket.socket | None] = [self._open() for _ in range(connections)]
        self.threads.append(threading.Thread(target=self._trickle, daemon=True))

    def _open(self) -> socket.socket | None:
        """A new connection with its request line sent; None when refused or reset (the
        broker's cap): tried again at the next line."""
        try:
            sock = socket.create_connection(self._address, timeout=SOCKET_TIMEOUT_S)
        except OSError:
            return None
        try:
            sock.sendall(b"GET /offset?topic=abuse&partition=0&offset=0 HTTP/1.1\r\n")
        except OSError:
            sock.close()
            return None
        return sock

    def _trickle(self) -> None:
        line = 0
        while not self.stop.wait(self._interval_s):
            line += 1
            for index, sock in enumerate(self._slots):
                if sock is not None:
                    try:
                        sock.sendall(b"X-Slow-%d: %d\r\n" % (line, line))
                        continue
                    except OSError:
                        sock.close()
                self._slots[index] = self._open()
                self.reopened += 1

    def close(self) -> None:
        super().close()
        for sock in self._slots:
            if sock is not None:
                sock.close()


class HttpPipelined(Abuse):
    """``connections`` connections, each sending ``requests`` pipelined gets of
    ``max_bytes`` in one write, reading every response, and sending them again.

    One thread drives them all with a selector and reads the responses without parsing
    them (each has the size of the first one, read whole at the start), so that the client
    spends little CPU and the broker does the work.

    Attributes:
        answered: responses read, over all connections.
    """

    def __init__(
        self,
        address: tuple[str, int],
        topic: str,
        connections: int,
        requests: int = PIPELINED_REQUESTS,
        max_bytes: int = 1024,
    ) -> None:
        super().__init__()
        request = get_request(topic, max_bytes)
        self._block = request * requests
        self._requests = requests
        self.answered = 0
        self._response_bytes = 0
        for _ in range(connections):
            sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
            self.sockets.append(sock)
            sock.sendall(request)
            self._response_bytes = response_bytes(sock)  # the first response, whole
        self.threads.append(threading.Thread(target=self._flood, daemon=True))

    def _flood(self) -> None:
        due = dict.fromkeys(self.sockets, 0)  # response bytes still to read, per connection
        buffer = bytearray(1 << 20)
        with selectors.DefaultSelector() as selector:
            for sock in self.sockets:
                selector.register(sock, selectors.EVENT_READ)
            while not self.stop.is_set():
                for sock, remaining in due.items():
                    if remaining == 0:
                        try:
                            sock.sendall(self._block)
                        except OSError:
                            return  # closed by the broker or by ``close``
                        due[sock] = self._requests * self._response_bytes
                for key, _events in selector.select(0.1):
                    try:
                        received = key.fileobj.recv_into(buffer)
                    except OSError:
                        return
                    if not received:
                        return
                    due[key.fileobj] -= received
                    if due[key.fileobj] <= 0:
                        due[key.fileobj] = 0
                        self.answered += self._requests


class HttpNonReaders(NonReaders):
    """``connections`` connections sending pipelined 1 MiB gets forever, reading nothing
    (``NonReaders``)."""

    def __init__(
        self, address: tuple[str, int], topic: str, connections: int, max_bytes: int = 1 << 20
    ) -> None:
        block = get_request(topic, max_bytes) * 100
        super().__init__(
            lambda: socket.create_connection(address, timeout=SOCKET_TIMEOUT_S), block, connections
        )
