"""Replies straight to the socket, and the fallback when Twisted's write buffer is unknown.

``meta.server.protocol`` sends a reply with ``writeSomeData`` when the transport has nothing
buffered, which it learns from ``FileDescriptor``'s private buffers. An import-time probe
(``fd_buffer_layout_known``) decides whether those buffers look as expected; if not, every
reply goes through ``transport.write``. Both paths are tested here on a socket-less
``FileDescriptor``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import abstract

import meta.server.protocol as server_protocol
from meta.server.fd_buffers import buffer_never_empty, fd_buffer_layout_known
from meta.server.protocol import BrokerProtocol


class _Reactor:
    def addWriter(self, writer: object) -> None:
        pass

    def removeWriter(self, writer: object) -> None:
        pass


class SocketLike(abstract.FileDescriptor):
    """A connected descriptor whose socket takes up to ``room`` bytes per send."""

    connected = 1

    def __init__(self, room: int = 1 << 20) -> None:
        super().__init__(reactor=_Reactor())
        self.room = room
        self.sent: list[bytes] = []

    def writeSomeData(self, data: bytes) -> int:
        taken = bytes(data[: self.room])
        self.sent.append(taken)
        return len(taken)

    def buffered(self) -> bytes:
        return bytes(self.dataBuffer[self.offset :]) + b"".join(self._tempDataBuffer)


class ElsewhereBuffered(abstract.FileDescriptor):
    """A descriptor that keeps its write buffer under other names (a future Twisted)."""

    connected = 1

    def __init__(self, reactor: object = None) -> None:
        super().__init__(reactor=reactor or _Reactor())
        del self._tempDataBuffer
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        self._pending.append(data)

    def doWrite(self) -> None:
        self._pending.clear()


def _protocol(transport: abstract.FileDescriptor) -> BrokerProtocol:
    broker = SimpleNamespace(
        config=SimpleNamespace(message_bytes_max=1024), slave_id=-1, refuses_puts=False
    )
    protocol = BrokerProtocol(broker)  # type: ignore[arg-type]
    protocol.transport = transport
    return protocol


def test_the_installed_twisted_buffers_writes_as_the_fast_path_expects():
    assert fd_buffer_layout_known()
    assert server_protocol.FD_BUFFER_LAYOUT_KNOWN


def test_a_descriptor_buffering_elsewhere_is_not_known():
    assert not fd_buffer_layout_known(ElsewhereBuffered)


def test_a_descriptor_that_cannot_be_built_is_not_known():
    class Broken(abstract.FileDescriptor):
        def __init__(self, reactor: object = None) -> None:
            raise TypeError("no")

    assert not fd_buffer_layout_known(Broken)


def test_a_reply_goes_straight_to_the_socket_when_nothing_is_buffered():
    transport = SocketLike()
    _protocol(transport)._write(b"result 200 0 1\r\n")
    assert transport.sent == [b"result 200 0 1\r\n"]
    assert transport.buffered() == b""


def test_a_reply_waits_behind_bytes_already_buffered():
    transport = SocketLike()
    transport.write(b"earlier")
    _protocol(transport)._write(b"later")
    assert transport.sent == []
    assert transport.buffered() == b"earlierlater"


def test_what_the_socket_does_not_take_is_buffered_in_order():
    transport = SocketLike(room=3)
    _protocol(transport)._write(b"abcdef")
    assert transport.sent == [b"abc"]
    assert transport.buffered() == b"def"


@pytest.fixture
def fallback(monkeypatch):
    monkeypatch.setattr(server_protocol, "_buffer_empty", buffer_never_empty)


def test_with_the_fallback_every_reply_goes_through_transport_write(fallback):
    transport = SocketLike()
    _protocol(transport)._write(b"result 200 0 1\r\n")
    assert transport.sent == []
    assert transport.buffered() == b"result 200 0 1\r\n"
    transport.doWrite()
    assert transport.sent == [b"result 200 0 1\r\n"]
