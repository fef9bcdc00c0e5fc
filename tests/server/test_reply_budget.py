"""The broker-wide bound on queued reply bytes (meta.server.reply_budget), on fake
connections and on ``BrokerProtocol`` over in-memory transports."""

from __future__ import annotations

import tracemalloc
from collections import deque

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import encode
from meta.protocol.commands import Result, Version
from meta.protocol.encoding import encode_value_header
from meta.server.broker import Broker
from meta.server.protocol import FILE_REPLY_COST_BYTES, BrokerProtocol
from meta.server.replies import FileReply
from meta.server.reply_budget import ReplyBudget
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config


class FakeConnection:
    """Keeps its queued bytes as the budget is told of them; records holds and releases."""

    def __init__(self, budget: ReplyBudget) -> None:
        self.budget = budget
        self.queued_bytes = 0
        self.holding = False

    def queue(self, size: int) -> None:
        self.queued_bytes += size
        self.budget.queued(self, size)

    def drain(self, size: int) -> None:
        self.queued_bytes -= size
        self.budget.sent(self, size)

    def hold_reading(self) -> None:
        self.holding = True

    def release_reading(self) -> None:
        self.holding = False


def test_under_the_bound_no_connection_is_held():
    budget = ReplyBudget(1000)
    connections = [FakeConnection(budget) for _ in range(3)]
    for connection in connections:
        connection.queue(300)
    assert (budget.queued_bytes, budget.held) == (900, 0)


def test_over_the_bound_the_largest_holders_are_held_until_the_rest_hold_half():
    budget = ReplyBudget(1000)
    big, middle, small, empty = (FakeConnection(budget) for _ in range(4))
    big.queue(500)
    small.queue(100)
    middle.queue(300)
    empty.queue(10)
    empty.drain(10)
    assert budget.held == 0
    middle.queue(200)  # 1300 in all: big and middle (500 each) held, small keeps 100
    assert [c.holding for c in (big, middle, small, empty)] == [True, True, False, False]
    assert budget.held_total == 2


def test_a_held_connection_is_released_once_its_queue_drained():
    budget = ReplyBudget(1000)
    reader, stuck = FakeConnection(budget), FakeConnection(budget)
    reader.queue(700)
    stuck.queue(700)
    assert reader.holding and stuck.holding
    reader.drain(500)
    assert reader.holding  # not drained yet
    reader.drain(200)
    assert (reader.holding, stuck.holding, budget.queued_bytes) == (False, True, 700)


def test_a_closed_connection_gives_its_bytes_back():
    budget = ReplyBudget(1000)
    connection = FakeConnection(budget)
    connection.queue(1500)
    budget.lost(connection, 1500)
    assert (budget.queued_bytes, budget.held) == (0, 0)


def make_broker(tmp_path, queued_reply_bytes_max: int) -> Broker:
    clock = Clock()
    config = broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    ).with_overrides(queued_reply_bytes_max=queued_reply_bytes_max)
    executor = ManualExecutor()
    store = StoreManager(config, clock, files=RecordingFiles(), executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    return broker


def connect(broker: Broker) -> tuple[BrokerProtocol, StringTransport]:
    protocol = BrokerProtocol(broker)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def test_connections_that_do_not_read_stop_being_read_and_others_are_not(tmp_path):
    """Goal: the bound acts across connections. Method: two connections whose transports
    are paused (their peers do not read) get the later replies of 120 requests each (puts
    acknowledged by an fsync, say) until together they pass the bound: both are held; a
    third, reading connection is still read and answered; once one stuck peer reads (its
    transport resumes), that connection is read again."""
    broker = make_broker(tmp_path, 4000)
    stuck = [connect(broker) for _ in range(2)]
    for protocol, _transport in stuck:
        protocol.pauseProducing()
        for opaque in range(120):
            protocol.send_reply(encode(Result(200, b"0 0 0", opaque)))
    assert broker.reply_budget.queued_bytes > 4000
    assert broker.reply_budget.held == 2
    assert [transport.producerState for _p, transport in stuck] == ["paused", "paused"]
    reader, reader_transport = connect(broker)
    reader.dataReceived(encode(Version(1)))
    assert reader_transport.producerState == "producing"
    assert reader_transport.value().startswith(b"result 200 ")
    first, first_transport = stuck[0]
    first.resumeProducing()
    assert first_transport.producerState == "producing"
    assert stuck[1][1].producerState == "paused"
    assert broker.reply_budget.queued_bytes == stuck[1][0].queued_bytes
    stuck[1][0].connectionLost()
    assert broker.reply_budget.queued_bytes == 0


def test_a_queued_file_reply_costs_at_most_what_the_budget_counts_for_it():
    """Goal: the budget bounds memory, so a queued ``FileReply`` must not take more than
    ``FILE_REPLY_COST_BYTES``. Method: queue 10,000 replies as a get builds them at its most
    expensive (a header with a long opaque, a position and a length that are ints of their
    own, as the compiled store's slices always are) and measure them with tracemalloc."""
    count = 10_000
    queue: deque[FileReply] = deque()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(count):
            position, length = 10**9 + index, 2**20 - (index & 7)
            header = encode_value_header(length, 2**31 - 1 - index)
            queue.append(FileReply(header, None, position, length))
        per_reply = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert len(queue) == count
    assert per_reply <= FILE_REPLY_COST_BYTES
