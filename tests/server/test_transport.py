"""The broker's TCP transport (meta.server.transport) against Twisted's ``tcp.Server``.

``BrokerTransport.doRead`` must return what ``tcp.Server.doRead`` returns in every case (data,
nothing to read, the peer's FIN, a failed receive), since the reactor's disconnect and
half-close handling acts on that value; ``send_now`` must send only when nothing is buffered.
Each transport sits on one end of a local socket pair (no network), on a ``MemoryReactor``.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from twisted.internet import main, tcp
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor
from twisted.python.failure import Failure

import meta.server.transport as transport_module
from meta.server.protocol import BrokerProtocol
from meta.server.transport import BrokerTransport, use_broker_transport

READABLE_WAIT_S = 10.0


class Recording(Protocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)


class FailingSocket:
    """A socket whose every receive and send fails with ``error``."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def recv(self, size: int) -> bytes:
        raise self.error

    def send(self, data: bytes) -> int:
        raise self.error


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    try:
        yield ours, peer
    finally:
        ours.close()
        peer.close()


def make(kind: type, sock: socket.socket) -> tuple[tcp.Server, Recording]:
    protocol = Recording()
    transport = kind(sock, protocol, ("127.0.0.1", 1), None, 0, MemoryReactor())
    protocol.makeConnection(transport)
    return transport, protocol


def wait_readable(sock: socket.socket) -> None:
    assert select.select([sock], [], [], READABLE_WAIT_S)[0], "nothing arrived"


def read_both_ways(prepare, pair) -> list[tuple[object, list[bytes]]]:
    """``doRead``'s result and what the protocol got, for ``tcp.Server`` and then for
    ``BrokerTransport``, each on a fresh socket pair made ready by ``prepare(ours, peer)``."""
    results = []
    for kind in (tcp.Server, BrokerTransport):
        ours, peer = pair if kind is tcp.Server else socket.socketpair()
        try:
            transport, protocol = make(kind, ours)
            prepare(ours, peer)
            results.append((transport.doRead(), protocol.received))
        finally:
            if kind is BrokerTransport:
                ours.close()
                peer.close()
    return results


def test_a_read_hands_the_bytes_to_the_protocol(pair):
    def prepare(ours, peer):
        peer.sendall(b"version 1\r\n")
        wait_readable(ours)

    twisted, broker = read_both_ways(prepare, pair)
    assert broker == twisted == (None, [b"version 1\r\n"])


def test_a_broker_protocol_is_named_to_its_transport_while_connected(pair):
    """Goal: a ``BrokerProtocol`` is the transport's ``broker_protocol`` from its connection
    to its loss, and the transport's reads reach it. Method: a protocol that stopped taking
    requests (it counts what it reads and handles nothing) on one end of a socket pair."""
    ours, peer = pair
    broker = SimpleNamespace(
        config=SimpleNamespace(message_bytes_max=1024),
        connection_made=lambda connection: None,
        connection_lost=lambda connection: None,
    )
    protocol = BrokerProtocol(broker)  # type: ignore[arg-type]
    transport = BrokerTransport(ours, protocol, ("127.0.0.1", 1), None, 0, MemoryReactor())
    protocol.makeConnection(transport)
    assert transport.broker_protocol is protocol
    protocol.stop_requests()
    peer.sendall(b"version 1\r\n")
    wait_readable(ours)
    assert transport.doRead() is None
    assert protocol.received_bytes == len(b"version 1\r\n")
    transport.connectionLost(Failure(main.CONNECTION_DONE))
    assert transport.broker_protocol is None


def test_another_protocol_is_not_named_to_its_transport(pair):
    transport, _protocol = make(BrokerTransport, pair[0])
    assert transport.broker_protocol is None


def test_a_read_with_nothing_to_receive_returns_nothing(pair):
    twisted, broker = read_both_ways(lambda ours, peer: None, pair)
    assert broker == twisted == (None, [])


def test_the_peers_fin_is_connection_done(pair):
    def prepare(ours, peer):
        peer.shutdown(socket.SHUT_WR)
        wait_readable(ours)

    twisted, broker = read_both_ways(prepare, pair)
    assert broker == twisted == (main.CONNECTION_DONE, [])


def test_a_failed_receive_is_connection_lost(pair):
    results = []
    for kind in (tcp.Server, BrokerTransport):
        transport, protocol = make(kind, pair[0] if kind is tcp.Server else pair[1])
        transport.socket = FailingSocket(ConnectionResetError(104, "reset"))
        results.append((transport.doRead(), protocol.received))
    assert results[1] == results[0] == (main.CONNECTION_LOST, [])


def test_a_reply_goes_straight_to_the_socket_when_nothing_is_buffered(pair):
    ours, peer = pair
    transport, _protocol = make(BrokerTransport, ours)
    assert transport.send_now(b"result 200 0 1\r\n") == 16
    wait_readable(peer)
    assert peer.recv(64) == b"result 200 0 1\r\n"


def test_a_reply_is_not_sent_ahead_of_bytes_already_buffered(pair):
    ours, _peer = pair
    transport, _protocol = make(BrokerTransport, ours)
    transport.write(b"earlier")
    assert transport.send_now(b"later") == 0


def test_a_failed_send_sends_nothing(pair):
    transport, _protocol = make(BrokerTransport, pair[0])
    transport.socket = FailingSocket(BrokenPipeError(32, "broken pipe"))
    assert transport.send_now(b"result 200 0 1\r\n") == 0


def test_with_twisteds_buffers_unknown_nothing_is_sent_at_once(pair, monkeypatch):
    monkeypatch.setattr(transport_module, "FD_BUFFER_LAYOUT_KNOWN", False)
    transport, _protocol = make(BrokerTransport, pair[0])
    assert transport.send_now(b"result 200 0 1\r\n") == 0


def test_a_tcp_port_builds_broker_transports_and_other_ports_are_left_alone():
    port = tcp.Port(0, Factory())
    assert use_broker_transport(port)
    assert port.transport is BrokerTransport
    assert not use_broker_transport(object())
