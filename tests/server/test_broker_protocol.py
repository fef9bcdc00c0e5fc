"""The broker's protocol on an in-memory transport, with a recording file layer.

No real network, no real time (STYLE 21): a ``task.Clock`` reactor, ``StringTransport``s and
a manual flush executor that runs fsync batches only when the test says so.
"""

from __future__ import annotations

import pytest
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import NEED_DATA, Decoder, decode_all, encode
from meta.protocol.commands import Data, Get, Put, Result, Version
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import EIO, ManualExecutor, RecordingFiles, broker_config, topic_config


class RecordingTransport(StringTransport):
    """A transport that logs every reply into the file layer's event list."""

    def __init__(self, events: list) -> None:
        super().__init__()
        self.events = events
        self._decoder = Decoder()

    def write(self, data: bytes) -> None:
        self._decoder.receive_data(data)
        while (frame := self._decoder.next_command()) is not NEED_DATA:
            self.events.append(("reply", frame.opaque))
        super().write(data)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def setup(tmp_path, clock):
    files = RecordingFiles()
    executor = ManualExecutor()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    store = StoreManager(config, clock, files=files, executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    return broker, files, executor


def connect(broker: Broker, events: list) -> tuple[BrokerProtocol, RecordingTransport]:
    protocol = BrokerProtocol(broker)
    transport = RecordingTransport(events)
    protocol.makeConnection(transport)
    return protocol, transport


def put_bytes(opaque: int, data: bytes = b"payload") -> bytes:
    return encode(Put("test", 0, data, 0, opaque))


def test_the_protocol_is_told_of_the_peers_fin_instead_of_being_closed(setup):
    """Goal: after a half-close the replies still go out, in either build. Method: the
    adaptation ``tcp.Connection`` makes on the peer's FIN finds the protocol half-closeable."""
    broker, files, _executor = setup
    protocol, _transport = connect(broker, files.events)
    assert IHalfCloseableProtocol(protocol, None) is protocol


def test_in_group_commit_no_reply_leaves_before_the_fsync_that_covers_it(setup):
    """Goal: DECISIONS 2 at the wire. Method: three puts arrive; the flush batch is held back;
    no reply may be written until the fsync ran, and each reply follows that fsync."""
    broker, files, executor = setup
    protocol, transport = connect(broker, files.events)
    protocol.dataReceived(put_bytes(1) + put_bytes(2) + put_bytes(3))
    assert transport.value() == b""
    executor.run_all()
    kinds = [kind for kind, _ in files.events if kind in ("write", "fsync", "reply")]
    assert kinds.index("fsync") < kinds.index("reply")
    assert [name for kind, name in files.events if kind == "reply"] == [1, 2, 3]


def test_a_hundred_concurrent_producers_share_far_fewer_fsyncs(setup):
    """Goal: group commit batches. Method: 100 connections put while one fsync is in flight;
    every producer gets its 200, with at most a handful of fsyncs in all."""
    broker, files, executor = setup
    connections = [connect(broker, files.events) for _ in range(100)]
    for opaque, (protocol, _transport) in enumerate(connections):
        protocol.dataReceived(put_bytes(opaque))
    executor.run_all()
    replies = [decode_all(transport.value()) for _protocol, transport in connections]
    assert all(reply[0].code == 200 for reply in replies)
    assert files.count("fsync") <= 3


def test_a_failed_fsync_gives_500s_and_acknowledges_nothing_that_was_not_on_disk(setup):
    broker, files, executor = setup
    protocol, transport = connect(broker, files.events)
    files.fsync_error = EIO
    protocol.dataReceived(put_bytes(1) + put_bytes(2))
    executor.run_all()
    replies = decode_all(transport.value())
    assert [reply.code for reply in replies] == [500, 500]
    assert b"Input/output error" in replies[0].body
    files.fsync_error = None
    protocol.dataReceived(put_bytes(3) + encode(Get("test", "g", 0, 0, 1024, 4)))
    executor.run_all()
    later = decode_all(transport.value())[2:]
    assert later[0].code == 500  # the partition stays failed until an operator acts
    assert later[1].code == 404  # nothing unacknowledged is visible


def test_a_get_is_streamed_from_the_segment_in_chunks_while_the_transport_is_paused(setup, clock):
    """Requests read while the transport is paused wait until it resumes: the get's
    reply then, and the version after it in the next reactor turn."""
    broker, files, executor = setup
    protocol, transport = connect(broker, files.events)
    data = b"x" * 300_000
    protocol.dataReceived(put_bytes(1, data))
    executor.run_all()
    transport.clear()
    protocol.pauseProducing()
    protocol.dataReceived(encode(Get("test", "g", 0, 0, 1 << 20, 2)) + encode(Version(3)))
    assert transport.value() == b""
    protocol.resumeProducing()  # the get's reply; the version waits for the next turn
    clock.advance(0)
    frames = decode_all(transport.value())
    assert isinstance(frames[0], Data)
    assert len(frames[0].data) == 20 + len(data)
    assert frames[1] == Result(200, broker.version.encode(), 3)


def test_reading_pauses_when_too_many_requests_are_in_flight(setup, monkeypatch):
    broker, files, executor = setup
    monkeypatch.setattr("meta.server.protocol.INFLIGHT_MAX", 10)
    protocol, transport = connect(broker, files.events)
    protocol.dataReceived(b"".join(put_bytes(opaque) for opaque in range(11)))
    assert transport.producerState == "paused"
    executor.run_all()
    assert transport.producerState == "producing"


def test_reading_stops_while_the_transports_buffer_is_full(setup):
    """The transport pauses its producer when its buffer is full (the peer does not read):
    the protocol stops reading its requests until the buffer has drained."""
    broker, files, _executor = setup
    protocol, transport = connect(broker, files.events)
    protocol.pauseProducing()
    assert transport.producerState == "paused"
    protocol.dataReceived(encode(Version(1)))  # already read: answered into the queue
    protocol.resumeProducing()
    assert transport.producerState == "producing"
    assert decode_all(transport.value()) == [Result(200, broker.version.encode(), 1)]


class PollClock(Clock):
    """A ``Clock`` with ``LeanEPollReactor.call_after_events``: ``poll`` runs ``handle`` as
    the events of one poll, then the calls asked for during it."""

    def __init__(self) -> None:
        super().__init__()
        self.after_events: list | None = None

    def call_after_events(self, function) -> None:
        if self.after_events is None:
            function()
        elif function not in self.after_events:
            self.after_events.append(function)

    def poll(self, handle) -> None:
        self.after_events = []
        handle()
        after, self.after_events = self.after_events, None
        for function in after:
            function()


def test_the_puts_of_one_poll_share_one_write_made_after_every_read_of_it(tmp_path):
    """Goal: with many connections each holding one put, one poll's puts are written together.
    Method: three connections each read a put within one poll of a reactor offering
    ``call_after_events``; nothing is written before the poll's events end, then one write
    holds all three records, and after the fsync each connection gets its 200."""
    files = RecordingFiles()
    executor = ManualExecutor()
    clock = PollClock()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    store = StoreManager(config, clock, files=files, executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    connections = [connect(broker, files.events) for _ in range(3)]
    writes_before = files.count("write")

    def reads() -> None:
        for opaque, (protocol, _transport) in enumerate(connections, 1):
            protocol.dataReceived(put_bytes(opaque))
        # Staged, not written, until the poll's events end.
        assert files.count("write") == writes_before

    clock.poll(reads)
    assert files.count("write") == writes_before + 1
    executor.run_all()
    replies = [decode_all(transport.value()) for _protocol, transport in connections]
    assert [[(reply.code, reply.opaque) for reply in r] for r in replies] == [
        [(200, 1)],
        [(200, 2)],
        [(200, 3)],
    ]
    # Outside a poll (a timed call, a thread's call) a read's work is done at once.
    connections[0][0].dataReceived(put_bytes(4))
    assert files.count("write") == writes_before + 2
