"""``SlaveLink``: requests go out as built, replies are matched by opaque, every request is
answered exactly once (its reply, a timeout after ``sendToSlaveTimeoutInMills``, or a
connection loss), and the link reconnects. No real network or time (STYLE 21)."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from meta.protocol.encoding import encode_result
from meta.protocol.sync_frame import encode_sync
from meta.sync.slave_link import DISCONNECTED, FLUSH_LATE_S, TIMED_OUT, SlaveLink


class Harness:
    def __init__(self, timeout_ms: int = 2000) -> None:
        self.reactor = MemoryReactorClock()
        self.events: list[str] = []
        self.link = SlaveLink(
            "127.0.0.1",
            8124,
            timeout_ms,
            self.reactor,
            lambda: self.events.append("up"),
            lambda: self.events.append("down"),
            lambda: self.events.append("batch"),
        )
        self.answers: list[tuple[str, int, bytes]] = []

    def connect(self) -> tuple[object, StringTransport]:
        if not self.reactor.tcpClients:
            self.link.start()
        factory = self.reactor.tcpClients[-1][2]
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def send(self, name: str, body: bytes = b"hello") -> bool:
        def build(opaque: int) -> bytes:
            return encode_sync(b"test", 0, 0, 5, 907060870, opaque, body)

        return self.link.send(build, lambda code, reply: self.answers.append((name, code, reply)))


def test_the_link_connects_to_the_slave_and_sends_what_was_built():
    harness = Harness()
    harness.link.start()
    host, port = harness.reactor.tcpClients[0][:2]
    assert (host, port) == ("127.0.0.1", 8124)
    assert not harness.send("early")  # not connected: refused, never answered
    _protocol, transport = harness.connect()
    assert harness.events == ["up"] and harness.link.connected
    assert harness.send("a")
    assert transport.value() == b""
    harness.reactor.advance(FLUSH_LATE_S)  # no batch end flushed it: the late flush does
    assert transport.value() == b"sync test 0 5 0 5 907060870 1\r\nhello"


def test_replies_are_matched_by_opaque_in_any_order():
    harness = Harness()
    protocol, _transport = harness.connect()
    harness.send("a")
    harness.send("b")
    protocol.dataReceived(encode_result(200, b"5 0 25", 2) + encode_result(500, b"no", 1)[:9])
    assert harness.answers == [("b", 200, b"5 0 25")]
    protocol.dataReceived(encode_result(500, b"no", 1)[9:])
    assert harness.answers[1] == ("a", 500, b"no")
    assert harness.link.in_flight == 0
    assert harness.events.count("batch") == 2


def test_a_request_without_reply_times_out_once_at_its_deadline():
    harness = Harness(timeout_ms=1000)
    protocol, _transport = harness.connect()
    harness.send("a")
    harness.reactor.advance(0.5)
    harness.send("b")
    harness.reactor.advance(0.49)
    assert harness.answers == []
    harness.reactor.advance(0.02)
    assert harness.answers == [("a", TIMED_OUT, b"")]
    harness.reactor.advance(0.5)
    assert harness.answers[1] == ("b", TIMED_OUT, b"")
    protocol.dataReceived(encode_result(200, b"5 0 0", 1))  # too late: dropped
    assert len(harness.answers) == 2


def test_a_lost_connection_fails_every_request_in_flight_at_once():
    harness = Harness()
    protocol, _transport = harness.connect()
    harness.send("a")
    harness.send("b")
    protocol.connectionLost(Failure(ConnectionError("reset")))
    assert harness.answers == [("a", DISCONNECTED, b""), ("b", DISCONNECTED, b"")]
    assert harness.events == ["up", "down", "batch"]
    assert not harness.link.connected
    harness.reactor.advance(10)  # no timeout comes later for them
    assert len(harness.answers) == 2


def test_the_link_reconnects_after_a_loss_until_stopped(monkeypatch):
    harness = Harness()
    harness.connect()
    factory = harness.reactor.tcpClients[0][2]
    connector = harness.reactor.connectors[0]
    attempts = []
    monkeypatch.setattr(connector, "connect", lambda: attempts.append(1), raising=False)
    factory.clientConnectionLost(connector, Failure(ConnectionError("reset")))
    harness.reactor.advance(1.5)  # the back-off starts near RECONNECT_DELAY_MIN_S
    assert attempts == [1]
    factory.clientConnectionFailed(connector, Failure(ConnectionError("refused")))
    harness.link.stop()
    assert connector._disconnected
    harness.reactor.advance(10)
    assert attempts == [1]  # stopped: no more attempts


def test_requests_wait_for_the_owners_flush_then_go_straight_to_the_socket_in_order():
    """Goal: requests are written only by ``flush_output`` (the broker's end of batch, after
    its own write), together, with ``send_now`` taking what the socket takes at once and
    ``transport.write`` the rest, in order. Method: a ``send_now`` that takes 10 bytes;
    ``on_output`` records the link asking for its flush."""
    taken: list[bytes] = []
    asked: list[object] = []

    def send_now(transport, data: bytes) -> int:
        taken.append(data[:10])
        return 10

    harness = Harness()
    harness.link = SlaveLink(
        "127.0.0.1", 8124, 2000, harness.reactor, lambda: None, lambda: None,
        send_now=send_now, on_output=asked.append,
    )  # fmt: skip
    _protocol, transport = harness.connect()
    harness.send("a")
    harness.send("b")
    assert asked == [harness.link]  # once per gathering
    assert taken == [] and transport.value() == b""  # nothing before the owner's flush
    harness.link.flush_output()
    assert len(taken) == 1  # one write for both
    assert taken[0] + transport.value() == b"".join(
        encode_sync(b"test", 0, 0, 5, 907060870, opaque, b"hello") for opaque in (1, 2)
    )
    pending = [call.func.__name__ for call in harness.reactor.getDelayedCalls()]
    assert pending == ["_expire"]  # the flush cancelled the late one; the timeout stays


def test_requests_gathered_when_the_connection_drops_are_never_sent_on_the_next_one():
    harness = Harness()
    protocol, first = harness.connect()
    harness.send("a")
    protocol.connectionLost(Failure(ConnectionError("gone")))
    assert harness.answers == [("a", DISCONNECTED, b"")]
    _protocol, second = harness.connect()
    harness.reactor.advance(FLUSH_LATE_S)
    assert first.value() == second.value() == b""


def test_a_batched_request_arms_no_late_flush_and_waits_for_the_owners_flush():
    """Goal: a put's ``sync`` (sent ``batched``: its batch end flushes the link) costs no
    timer, while any other request still gets the late flush. Method: the delayed calls of
    the reactor after each kind of send."""
    harness = Harness()
    _protocol, transport = harness.connect()
    harness.link.send(lambda opaque: b"sync %d\r\n" % opaque, lambda code, body: None, True)
    pending = [call.func.__name__ for call in harness.reactor.getDelayedCalls()]
    assert pending == ["_expire"]
    harness.reactor.advance(FLUSH_LATE_S)
    assert transport.value() == b""  # only the owner's flush writes it
    harness.send("probe")
    pending = sorted(call.func.__name__ for call in harness.reactor.getDelayedCalls())
    assert pending == ["_expire", "_flush_late"]
    harness.reactor.advance(FLUSH_LATE_S)
    assert transport.value().startswith(b"sync 1\r\nsync test 0 5 0 5 907060870 2\r\n")


def test_a_read_of_one_whole_reply_is_answered_as_the_decoder_answers_it():
    """Goal: a read that is exactly one ``result`` frame (a synchronous producer's reply),
    taken without the decoder, gives each request what the decoder's way gives it. Method:
    the same replies to two links, once as whole reads and once a byte at a time."""
    replies = [(200, b"5 0 25"), (500, b"slave answered no"), (200, b""), (503, b"result 1 1 1")]
    answers = []
    for whole in (True, False):
        harness = Harness()
        protocol, _transport = harness.connect()
        for index, (code, body) in enumerate(replies, start=1):
            harness.send(str(index))
            frame = encode_result(code, body, index)
            for chunk in [frame] if whole else [frame[at : at + 1] for at in range(len(frame))]:
                protocol.dataReceived(chunk)
        answers.append(harness.answers)
        assert harness.link.in_flight == 0
    assert answers[0] == answers[1]
    assert answers[0][1] == ("2", 500, b"slave answered no")


def test_a_whole_reply_to_no_request_is_dropped_and_the_next_reply_still_matched():
    harness = Harness()
    protocol, _transport = harness.connect()
    harness.send("a")
    protocol.dataReceived(encode_result(200, b"5 0 0", 7))  # not ours: dropped
    assert harness.answers == [] and harness.link.in_flight == 1
    protocol.dataReceived(encode_result(200, b"5 0 9", 1))
    assert harness.answers == [("a", 200, b"5 0 9")]


def test_a_whole_reply_with_an_opaque_out_of_range_drops_the_connection_as_bad_data():
    harness = Harness()
    protocol, transport = harness.connect()
    harness.send("a")
    protocol.dataReceived(encode_result(200, b"5 0 0", 2**31))
    assert transport.disconnecting and harness.answers == []


def test_a_read_that_ends_a_skipped_body_is_not_taken_for_a_reply(monkeypatch):
    """Goal: while the decoder skips a too-large reply's body, a read of that body is never
    matched as a reply of its own, even when it reads like one. Method: a 4-byte body bound,
    a reply whose body is a whole ``result`` frame for another request, read in two parts."""
    monkeypatch.setattr("meta.sync.slave_link.REPLY_BODY_BYTES_MAX", 4)
    harness = Harness()
    protocol, _transport = harness.connect()
    harness.send("a")
    harness.send("b")
    inner = encode_result(200, b"0 1", 2)
    frame = encode_result(200, inner, 1)
    protocol.dataReceived(frame[: len(frame) - len(inner)])
    protocol.dataReceived(inner)  # the skipped body, not b's reply
    assert harness.answers == [] and harness.link.in_flight == 2
    protocol.dataReceived(encode_result(200, b"0 1", 2))
    assert harness.answers == [("b", 200, b"0 1")]


class _Socket:
    """A socket that takes ``takes[0]`` bytes of the next send (all when none are left), or
    raises it when it is an exception."""

    def __init__(self, *takes: int | OSError) -> None:
        self.takes = list(takes)
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        take = self.takes.pop(0) if self.takes else len(data)
        if isinstance(take, OSError):
            raise take
        self.sent.append(data[:take])
        return take


class _SocketTransport(StringTransport):
    def __init__(self, socket: _Socket) -> None:
        super().__init__()
        self.socket = socket

    def getHandle(self) -> _Socket:  # noqa: N802 - Twisted's spelling
        return self.socket


def test_while_the_transport_holds_nothing_requests_go_straight_to_its_socket():
    """Goal: with a ``send_now`` given, the link sends on the transport's socket itself as
    long as every earlier write went to the socket whole, and asks ``send_now`` again once
    the transport buffered bytes, until ``send_now`` took a whole write. Method: a socket
    that takes part of one send and refuses another (full), a ``send_now`` that records."""
    socket = _Socket(4, BlockingIOError())
    asked: list[bytes] = []

    def send_now(transport, data: bytes) -> int:
        asked.append(data)
        return len(data) if len(asked) == 2 else 0

    harness = Harness()
    harness.link = SlaveLink(
        "127.0.0.1", 8124, 2000, harness.reactor, lambda: None, lambda: None, send_now=send_now
    )
    harness.link.start()
    protocol = harness.reactor.tcpClients[-1][2].buildProtocol(None)
    transport = _SocketTransport(socket)
    protocol.makeConnection(transport)
    frames = [encode_sync(b"test", 0, 0, 5, 907060870, opaque, b"hello") for opaque in (1, 2, 3)]
    for name in "abc":
        harness.send(name)
        harness.link.flush_output()
    # a: 4 bytes to the socket, the rest to the transport; b: send_now (nothing taken) then
    # the transport; c: send_now takes it whole.
    assert socket.sent == [frames[0][:4]] and asked == frames[1:]
    assert transport.value() == frames[0][4:] + frames[1]
    harness.send("d")
    harness.send("e")
    harness.link.flush_output()  # the socket again, refusing: all of it to the transport
    harness.send("f")
    harness.link.flush_output()  # through send_now once more
    assert len(socket.sent) == 1 and asked[-1] == encode_sync(
        b"test", 0, 0, 5, 907060870, 6, b"hello"
    )
    assert transport.value().endswith(b"".join(
        encode_sync(b"test", 0, 0, 5, 907060870, opaque, b"hello") for opaque in (4, 5, 6)
    ))  # fmt: skip


def test_without_send_now_the_link_never_writes_to_the_socket_itself():
    socket = _Socket()
    harness = Harness()
    harness.link.start()
    protocol = harness.reactor.tcpClients[-1][2].buildProtocol(None)
    transport = _SocketTransport(socket)
    protocol.makeConnection(transport)
    harness.send("a")
    harness.link.flush_output()
    assert socket.sent == [] and transport.value().startswith(b"sync test 0 5 0 5 907060870 1")


def test_an_opened_request_is_in_flight_and_its_gathered_frame_waits_for_the_flush():
    harness = Harness()
    assert harness.link.open_request(lambda code, reply: None, 0.0) == 0  # down: refused
    assert harness.link.in_flight == 0
    protocol, transport = harness.connect()
    answers: list = []
    opaque = harness.link.open_request(lambda code, reply: answers.append((code, reply)), 0.0)
    assert opaque == 1 and harness.link.in_flight == 1
    harness.link.gather_batched(encode_sync(b"test", 0, 0, 5, 907060870, opaque, b"hi"))
    harness.reactor.advance(FLUSH_LATE_S)  # batched: no late flush
    assert transport.value() == b""
    harness.link.flush_output()
    assert transport.value() == b"sync test 0 2 0 5 907060870 1\r\nhi"
    protocol.dataReceived(encode_result(200, b"5 0 0", opaque))
    assert answers == [(200, b"5 0 0")]
