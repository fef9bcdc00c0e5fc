"""The gregor slave in one process: ``handle_sync``, its queue bound, order, ``stats sync``.

Goal: the slave's rules that a real-process test cannot reach cheaply (a full partition queue
needs fsyncs held back). Method: a ``Broker`` with in-memory transports, a ``task.Clock`` and
a manual flush executor (STYLE 21), made a gregor slave as ``meta.server.main`` does.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import meta.sync.gregor
from meta.config import ZkConfig
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Put, Stats, Sync, Transaction
from meta.protocol.message import iter_messages
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.manager import StoreManager
from meta.sync.gregor import POOL_BUSY, STATUS_TEST_TOPIC, GregorSlave, with_status_topic
from meta.sync.peers import SyncPeers
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config

MASTER = "192.168.1.1:8123"


class Slave:
    """A gregor slave broker, stopped after the running test (``closing_broker``);
    ``connect`` opens in-memory connections to it."""

    def __init__(self, directory: str, threshold: int = 0, secret: str | None = None) -> None:
        os.makedirs(directory, exist_ok=True)
        self.warned: list[str] = []  # peer hosts of the refusals logged
        self.executor = ManualExecutor()
        self.clock = Clock()
        self.clock.advance(1_900_000_000)
        topics = (topic_config("test", directory, num_partitions=2, unflush_threshold=threshold),)
        config = with_status_topic(
            broker_config(
                directory, topics=topics, zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False)
            )
        )
        self.files = RecordingFiles()
        store = StoreManager(config, self.clock, files=self.files, executor=self.executor)
        self.broker = Broker(config, self.clock, store=store)

        def is_open(connection) -> bool:
            return connection in self.broker.connections

        # StringTransport's peer is 192.168.1.1: the master's address here.
        def warn(host: str, text: str) -> None:
            self.warned.append(host)

        peers = SyncPeers(MASTER, frozenset({"192.168.1.1"}), secret, is_open, warn)
        self.broker.sync = GregorSlave(store.partitions, is_open, self.clock.seconds, peers)
        self.broker.refuses_puts = True
        self.broker.start(listen=False)
        closing_broker(self.broker, self.clock, self.executor)

    def connect(self, peer: str = "192.168.1.1") -> tuple[BrokerProtocol, StringTransport]:
        protocol = BrokerProtocol(self.broker)
        transport = StringTransport(peerAddress=IPv4Address("TCP", peer, 54321))
        protocol.makeConnection(transport)
        return protocol, transport


def replies(transport: StringTransport) -> list:
    found = decode_all(transport.value())
    transport.clear()
    return found


def sync(msg_id: int, opaque: int, partition: int = 0, body: bytes = b"x") -> bytes:
    return encode(Sync("test", partition, body, 0, msg_id, opaque, -1))


@pytest.fixture
def slave(tmp_path):
    return Slave(str(tmp_path / "slave"))


def test_a_sync_is_answered_only_after_its_fsync_in_group_commit(slave):
    protocol, transport = slave.connect()
    protocol.dataReceived(sync(5, 1))
    assert replies(transport) == []
    slave.executor.run_all()
    (reply,) = replies(transport)
    assert (reply.code, reply.body, reply.opaque) == (200, b"5 0 0", 1)


def test_a_full_partition_queue_answers_503_with_geckos_pool_busy_text(slave, monkeypatch):
    """Goal: the queue of one partition is bounded. Method: fsyncs held back, a bound of 3:
    the fourth sync to partition 0 gets 503 at once, partition 1 is not affected, and once
    the fsync ran the partition takes syncs again."""
    monkeypatch.setattr(meta.sync.gregor, "SYNCS_WAITING_MAX", 3)
    protocol, transport = slave.connect()
    protocol.dataReceived(b"".join(sync(10 + index, index) for index in range(4)))
    protocol.dataReceived(sync(20, 20, partition=1))
    (busy,) = replies(transport)
    assert (busy.code, busy.opaque, busy.body) == (503, 3, POOL_BUSY.encode())
    assert slave.broker.sync.waiting("test", 0) == 3
    slave.executor.run_all()
    assert sorted(reply.opaque for reply in replies(transport)) == [0, 1, 2, 20]
    assert slave.broker.sync.waiting("test", 0) == 0
    protocol.dataReceived(sync(30, 30))
    slave.executor.run_all()
    assert [(reply.code, reply.opaque) for reply in replies(transport)] == [(200, 30)]


def test_a_full_partition_queue_counts_bytes_too(slave, monkeypatch):
    monkeypatch.setattr(meta.sync.gregor, "SYNC_BYTES_WAITING_MAX", 10)
    protocol, transport = slave.connect()
    protocol.dataReceived(sync(1, 1, body=b"123456") + sync(2, 2, body=b"12345"))
    (busy,) = replies(transport)
    assert (busy.code, busy.opaque) == (503, 2)


def test_syncs_from_two_connections_are_stored_in_arrival_order(slave):
    """Goal: order per partition, not per connection (a reconnect mid-stream). Method: two
    connections interleave syncs to one partition while fsyncs are held back; the offsets
    follow the arrival order, whichever connection sent each."""
    first, first_transport = slave.connect()
    second, second_transport = slave.connect()
    first.dataReceived(sync(1, 1))
    second.dataReceived(sync(2, 2))
    first.dataReceived(sync(3, 3))
    first.connectionLost()
    second.dataReceived(sync(4, 4))
    slave.executor.run_all()
    assert [reply.code for reply in replies(second_transport)] == [200, 200]
    partition_log = slave.broker.store.get("test", 0)
    stored = iter_messages(partition_log.read(partition_log.slice(0, 1 << 20)))
    assert [record.msg_id for record in stored] == [1, 2, 3, 4]


def test_a_failed_sync_frees_its_place_in_the_queue(slave):
    protocol, transport = slave.connect()
    protocol.dataReceived(encode(Sync("test", 9, b"x", 0, 1, 1, -1)))
    (refused,) = replies(transport)
    assert refused.code == 500
    assert b"wrong partition 9" in refused.body
    assert slave.broker.sync.waiting("test", 9) == 0


def test_plain_and_transactional_puts_get_403(slave):
    protocol, transport = slave.connect()
    protocol.dataReceived(
        encode(Put("test", 0, b"a", 0, 1)) + encode(Put("test", 0, b"a", 0, 2, tx_key="TX:s:1"))
    )
    assert [reply.code for reply in replies(transport)] == [403, 403]


def test_every_transaction_type_gets_500_unsupported_and_end_gets_nothing(slave):
    protocol, transport = slave.connect()
    types = {
        "BEGIN": "beginTransaction",
        "PREPARE": "prepareTransaction",
        "COMMIT_ONE_PHASE": "commitTransaction",
        "COMMIT_TWO_PHASE": "commitTransaction",
        "ROLLBACK": "rollbackTransaction",
        "FORGET": "forgetTransaction",
    }
    for opaque, type_ in enumerate(types):
        protocol.dataReceived(encode(Transaction("TX:s:1", "s", type_, opaque)))
    protocol.dataReceived(encode(Transaction("XID:1:0a:0b:q", "s", "END", 90)))
    protocol.dataReceived(encode(Transaction("TX:s:1", "s", "RECOVER", 91, unique_qualifier="q")))
    got = [(reply.code, reply.body.decode(), reply.opaque) for reply in replies(transport)]
    expected = [
        (500, f"Unsupported {method}", opaque) for opaque, method in enumerate(types.values())
    ]
    assert got == [*expected, (500, "Unsupported getPreparedTransactions", 91)]


def test_stats_sync_lists_every_partition_with_its_end_and_last_sync_time(slave):
    protocol, transport = slave.connect()
    slave.broker.partition_for_put(STATUS_TEST_TOPIC, 0)
    protocol.dataReceived(sync(7, 1, partition=1, body=b"abc"))
    slave.executor.run_all()
    replies(transport)
    protocol.dataReceived(encode(Stats("sync", 2)))
    (reply,) = replies(transport)
    assert reply.body.decode().split("\r\n") == [
        "role gregor",
        "master 192.168.1.1:54321",
        f"partition {STATUS_TEST_TOPIC}-0 0 0",
        "partition test-1 23 1900000000000",
        "",
    ]
    protocol.connectionLost()
    assert slave.broker.sync.master == "-"


def test_the_status_topic_is_added_once_with_one_partition(tmp_path):
    config = broker_config(str(tmp_path), topics=(topic_config("test", str(tmp_path)),))
    added = with_status_topic(config)
    assert added.topic_config(STATUS_TEST_TOPIC).num_partitions == 1
    assert added.is_legal_topic(STATUS_TEST_TOPIC)
    assert with_status_topic(added) is added


def test_a_gregor_master_address_shows_ipv6_hosts_in_brackets():
    peers = SyncPeers("[::1]:8123", frozenset({"::1"}), None, lambda c: True, print)
    gregor = GregorSlave(lambda: [], lambda connection: True, lambda: 0.0, peers)
    peer = SimpleNamespace(host="::1", port=9)
    connection = SimpleNamespace(transport=SimpleNamespace(getPeer=lambda: peer))
    assert gregor.refusal(connection) is None
    assert gregor.admit("test", 0, 1, connection)
    assert gregor.master == "[::1]:9"


def test_a_sync_over_max_message_size_gets_500_and_the_connection_goes_on(slave):
    protocol, transport = slave.connect()
    limit = slave.broker.config.message_bytes_max
    protocol.dataReceived(sync(1, 1, body=b"x" * (limit + 1)) + sync(2, 2))
    slave.executor.run_all()
    got = sorted((reply.opaque, reply.code) for reply in replies(transport))
    assert got == [(1, 500), (2, 200)]
