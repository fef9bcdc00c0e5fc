"""A blocking connection to one broker over the shared codec (no reactor).

Used by tests, ``tools/bench``, the Spark executors and, later, the client library. Requests
may be pipelined: ``send`` writes without waiting and ``receive`` returns the next reply
frame. Replies are matched by opaque by the caller; ``request`` does send + receive for the
one-at-a-time case and checks the opaque.

With ``value_in_place`` (the Spark reader) a large get reply is read by the kernel straight
into the ``bytearray`` its ``Data`` carries (``Decoder.body_space``): no copy after the read,
and the decoder reuses a block nobody references any more instead of allocating a fresh one
per reply. Header reads are then ``IN_PLACE_RECEIVE_BYTES`` at most, so little of a body is
read (and copied) with its header.

Invariants: the decoder limit bounds memory per reply (``reply_bytes_max``); every socket
operation has a timeout. Not thread-safe: one connection per thread.
"""

from __future__ import annotations

import itertools
import select
import socket

from meta.errors import MetaError
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import BodyTooLarge, Command, Data, Result

RECEIVE_BYTES = 256 * 1024
IN_PLACE_RECEIVE_BYTES = 16 * 1024


class ConnectionClosedError(MetaError):
    """The broker closed the connection before a reply arrived."""


def readable_within(sock: socket.socket, timeout_s: float) -> bool:
    """Whether ``sock`` reads as ready (bytes, or the peer's close) within ``timeout_s``.

    ``poll``, not ``select``: ``select`` refuses a descriptor numbered 1024 or more, which a
    client in a process with many open files gets.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(timeout_s, 0.0) * 1000.0))


class BrokerConnection:
    """A blocking, pipelining-capable connection to ``host:port``.

    Args:
        host: broker host.
        port: broker port.
        timeout_s: timeout of connect and of every send/receive.
        reply_bytes_max: largest reply body accepted.
        value_in_place: receive large get replies in place (see the module docstring); their
            ``Data.data`` is then a ``bytearray``, reused for a later reply only once nothing
            references it (views into it included).
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = 10.0,
        reply_bytes_max: int = 64 * 1024 * 1024,
        value_in_place: bool = False,
    ) -> None:
        self.address = (host, port)
        self._socket = socket.create_connection(self.address, timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = Decoder(body_bytes_max=reply_bytes_max, value_in_place=value_in_place)
        self._receive_bytes = IN_PLACE_RECEIVE_BYTES if value_in_place else RECEIVE_BYTES
        self._opaques = itertools.count(1)

    def next_opaque(self) -> int:
        return next(self._opaques) & 0x7FFFFFFF

    def send(self, command: Command) -> None:
        self.send_bytes(encode(command))

    def send_bytes(self, data: bytes) -> None:
        self._socket.sendall(data)

    def receive(self) -> Result | Data:
        """Return the next reply frame.

        Raises:
            ConnectionClosedError: the broker closed the connection.
            MetaError: the reply was too large or was not a reply frame.
        """
        while True:
            frame = self._decoder.next_command()
            if frame is not NEED_DATA:
                if isinstance(frame, Result | Data):
                    return frame
                if isinstance(frame, BodyTooLarge):
                    raise MetaError(f"reply of {frame.length} bytes is over the limit")
                raise MetaError(f"unexpected frame from broker: {frame!r}")
            space = self._decoder.body_space()
            if space is not None:
                with space:
                    received = self._socket.recv_into(space)
                if not received:
                    raise ConnectionClosedError(f"broker {self.address} closed the connection")
                self._decoder.body_received(received)
                continue
            data = self._socket.recv(self._receive_bytes)
            if not data:
                raise ConnectionClosedError(f"broker {self.address} closed the connection")
            self._decoder.receive_data(data)

    def reply_ready(self, timeout_s: float) -> bool:
        """Whether reply bytes arrive within ``timeout_s`` (or are already buffered)."""
        if self._decoder.buffered_bytes:
            return True
        return readable_within(self._socket, timeout_s)

    def request(self, command: Command) -> Result | Data:
        """Send one command and return its reply, checking the opaque."""
        self.send(command)
        reply = self.receive()
        opaque = getattr(command, "opaque", None)
        if opaque is not None and reply.opaque != opaque:
            raise MetaError(f"reply opaque {reply.opaque} does not match request {opaque}")
        return reply

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
