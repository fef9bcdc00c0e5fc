"""``ProtocolChannel``: one HTTP/1.1 connection of the HTTP protocol (twisted.web's channel).

twisted.web parses the requests (request line, headers, ``Content-Length`` or chunked
bodies, keep-alive, ``Expect: 100-continue``, the header limits); the broker's connection
policy (``meta.web.GuardedChannel``: the caps, the idle timeout, the head deadline, the
requests answered per reactor turn) is the base class's. This channel changes four more
things about a connection, none of them visible on the wire:

* An oversized put is refused from its headers: when a request's ``Content-Length`` is over
  ``maxMessageSize`` and it is a well-formed ``/put`` (the site's ``refuse_early``), the 413
  is written as soon as the headers are in, with ``Connection: close``, and the connection
  closes after it: nothing of the body is read or kept, and a client that sent ``Expect:
  100-continue`` never sends it. Bytes of the body already received are dropped.
* A response leaves in one send: its status line and headers are held until the first body
  bytes (or the end of the response) and go with them, straight to the socket when the
  transport has nothing buffered (``meta.server.protocol.send_now``, as TCP replies go),
  instead of two buffered writes and one more reactor turn.
* The addresses are asked of the transport once per connection, not once per request
  (the local one is a ``getsockname`` each time).
* ``send_file`` sends a region of a segment file with ``os.sendfile`` while the socket takes
  it (``meta.server.protocol.sendfile_now``), after what is buffered; a get's body is not
  copied through Python then.

Reactor thread only.
"""

from __future__ import annotations

from typing import Any

from meta.server.protocol import send_now, sendfile_now
from meta.web import GuardedChannel


class ProtocolChannel(GuardedChannel):
    """An HTTP/1.x connection that refuses an oversized put before reading its body and
    sends each response with as few writes as the socket allows."""

    _refused = False
    _head: bytes | None = None  # a response's status line and headers, not sent yet
    _host: Any = None
    _peer: Any = None

    def getHost(self) -> Any:
        """The local address, asked of the socket once (twisted.web asks per request)."""
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def getPeer(self) -> Any:
        """The peer's address, made once (twisted.web asks per request)."""
        if self._peer is None:
            self._peer = super().getPeer()
        return self._peer

    def allHeadersReceived(self) -> None:
        refusal = None
        if self.length is not None:
            refusal = self.factory.refuse_early(self._command, self._path, self.length)
        if refusal is None:
            super().allHeadersReceived()
            return
        self._refused = True
        self.requests[-1].gotLength(self.length)  # a sink for body bytes already received
        self.transport.write(refusal)
        self.loseConnection()

    def allContentReceived(self) -> None:
        if not self._refused:
            super().allContentReceived()

    def dataReceived(self, data: bytes) -> None:
        if not self._refused:
            super().dataReceived(data)

    # --- output ---------------------------------------------------------------------------------

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes, headers: Any) -> None:
        """Hold the status line and headers until the body's first bytes or the response's
        end (``requestDone``), so that both leave in one send. ``headers`` is the request's
        ``Headers`` (names and values were checked when set)."""
        lines = [version, b" ", code, b" ", reason, b"\r\n"]
        for name, values in headers.getAllRawHeaders():
            for value in values:
                lines += (name, b": ", value, b"\r\n")
        lines.append(b"\r\n")
        self._head = b"".join(lines)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            data = head + data
        sent = send_now(self.transport, data)
        if sent < len(data):
            self.transport.write(data[sent:] if sent else data)

    def writeSequence(self, iovec: list[bytes]) -> None:
        self.write(b"".join(iovec))

    def send_file(self, segment: Any, position: int, length: int) -> int:
        """Send up to ``length`` bytes of ``segment`` from ``position`` with ``os.sendfile``,
        after the response's head; return the bytes sent (0 while the transport has bytes
        buffered or the socket takes none: the caller then writes a chunk instead)."""
        if self._head is not None:
            self.write(b"")
        return sendfile_now(self.transport, segment, position, length)

    def requestDone(self, request: Any) -> None:
        if self._head is not None:
            self.write(b"")  # a response without a body (HEAD)
        super().requestDone(request)

    def loseConnection(self) -> None:
        if self._head is not None:
            self.write(b"")
        super().loseConnection()
