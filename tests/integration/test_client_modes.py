"""Consumer modes against real brokers: direct mode (no ZooKeeper), a suspended ZooKeeper
connection, and a running consumer moving to the slave when its master goes away.

Each test starts its own processes (brokers, and for the suspension test its own ZooKeeper,
which it stops and starts again). Every wait polls a condition with a deadline; the only
fixed windows are the ones asserting that nothing is delivered while paused.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from meta.client import ConsumerConfig, Message, MetaClientConfig, MetaMessageSessionFactory
from meta.protocol.commands import Put, Result
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import Collector, consumer_of, make_root, wait_for, zk_config
from tests.integration.test_slave import make_cluster, wait_until_identical

QUIET_WINDOW_S = 1.5
# Long enough that a restarted ZooKeeper JVM on a starved machine answers a reconnect (whose
# read may time out once, after two thirds of it) before the session expires.
SESSION_TIMEOUT_MS = 45000
"""How long a paused consumer is watched for (wrong) deliveries."""


def put(broker: BrokerProcess, topic: str, partition: int, bodies: list[bytes]) -> list[int]:
    """Put each body into ``partition``; return the message ids in order."""
    ids = []
    with broker.connect() as connection:
        for body in bodies:
            command = Put(topic, partition, body, 0, connection.next_opaque(), checksum(body))
            reply = connection.request(command)
            assert isinstance(reply, Result) and reply.code == 200, reply
            ids.append(int(reply.body.split()[0]))
    return ids


@pytest.fixture
def lone_broker(tmp_path):
    broker = BrokerProcess(tmp_path / "broker", topics={"direct": {"numPartitions": 3}})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_direct_mode_consumer_reads_the_named_partitions_of_one_broker(lone_broker):
    """Goal: spec 3.2 direct mode. Method: a broker without ZooKeeper; messages in partitions
    0, 1 and 2; a consumer of "0-0,0-2" must get exactly those of 0 and 2, in offset order,
    and report its offsets; one with consume_from_max_offset only what comes later."""
    ids = {
        p: put(lone_broker, "direct", p, [b"p%d-%d" % (p, n) for n in range(30)]) for p in (0, 1, 2)
    }
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{lone_broker.port}")
    with MetaMessageSessionFactory(config) as factory:
        assert factory._zk_client is None  # noqa: SLF001 - no ZooKeeper at all
        collector = Collector()
        consumer = factory.create_consumer(
            ConsumerConfig("direct-g", partition="0-0,0-2", max_delay_fetch_ms=200)
        )
        consumer.subscribe("direct", 64 * 1024, collector)
        consumer.complete_subscribe()
        wanted = set(ids[0]) | set(ids[2])
        wait_for(lambda: collector.ids() >= wanted, what="partitions 0 and 2")
        assert collector.ids() == wanted
        for partition in (0, 2):
            offsets = [m.offset for m in collector.messages if m.partition.partition == partition]
            assert offsets == sorted(offsets) and len(offsets) == 30
        assert consumer.owned_partitions() == {("direct", "0-0"), ("direct", "0-2")}
        ends = consumer.offsets()
        assert set(ends) == {("direct", "0-0"), ("direct", "0-2")}
        assert all(offset > 0 for offset in ends.values())

        tail = Collector()
        late = factory.create_consumer(
            ConsumerConfig("direct-tail", partition="0-1", consume_from_max_offset=True,
                           max_delay_fetch_ms=200)
        )  # fmt: skip
        late.subscribe("direct", 64 * 1024, tail)
        late.complete_subscribe()
        wait_for(lambda: late.offsets().get(("direct", "0-1"), 0) > 0, what="the tail offset")
        new = put(lone_broker, "direct", 1, [b"new-%d" % n for n in range(5)])
        wait_for(lambda: tail.ids() >= set(new), what="the new messages")
        assert tail.ids() == set(new)


@contextlib.contextmanager
def private_cluster(tmp_path, topic: str):
    """A ZooKeeper of the test's own (it may stop it), a broker serving ``topic`` (one
    partition) and a factory, all stopped at the end: ``(server, root, broker, factory)``."""
    from tests.integration.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    root = make_root(server)
    broker = BrokerProcess(
        tmp_path / "broker",
        system={"brokerId": 1},
        topics={topic: {"numPartitions": 1}},
        zk_connect=server.connect_string,
        zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": SESSION_TIMEOUT_MS},
    ).start()
    factory = MetaMessageSessionFactory(
        zk_config(server, root, zk_session_timeout_ms=SESSION_TIMEOUT_MS)
    )
    try:
        yield server, root, broker, factory
    finally:
        factory.shutdown()
        broker.stop()
        server.stop(remove_data=True)


def test_a_suspended_zookeeper_connection_pauses_fetching_and_commits(tmp_path):
    """Goal: SUSPENDED (connection lost, session alive) pauses fetching and offset commits,
    CONNECTED on the same session resumes both without re-registering. Method: a private
    ZooKeeper is stopped; the consumer must report paused, receive nothing that is put
    meanwhile and write no offset; after ZooKeeper is back the messages arrive, the session
    and the ids node are the same ones and the offsets are committed."""
    from kazoo.client import KazooClient

    admin = None
    with private_cluster(tmp_path, "susp") as (server, root, broker, factory):
        try:
            collector = Collector()
            consumer = consumer_of(factory, "susp", "g-susp", collector, max_delay_fetch_ms=200,
                                   long_poll_ms=100, commit_offset_period_ms=100)  # fmt: skip
            first = put(broker, "susp", 0, [b"a%d" % n for n in range(10)])
            wait_for(lambda: collector.ids() >= set(first), what="the first messages")
            offset_path = f"{root}/consumers/g-susp/offsets/susp/1-0"
            ids_path = f"{root}/consumers/g-susp/ids/{consumer.consumer_id}"
            zk = factory._zk_client  # noqa: SLF001
            wait_for(lambda: zk.exists(offset_path) and zk.get(offset_path)[0].endswith(b"-%d" % (
                10 * (20 + 2))), what="the first commit")  # fmt: skip
            session = zk.client_id[0]
            owner_before = zk.exists(ids_path).ephemeralOwner

            server.stop()
            wait_for(lambda: consumer.paused, what="the consumer to pause")
            second = put(broker, "susp", 0, [b"b%d" % n for n in range(10)])
            deadline = time.monotonic() + QUIET_WINDOW_S
            while time.monotonic() < deadline:
                assert not (collector.ids() & set(second)), "delivered while suspended"
                time.sleep(0.05)
            assert consumer.paused

            server._fixed_port = server.port  # noqa: SLF001 - same port, same data: sessions live
            server.start()
            wait_for(
                lambda: collector.ids() >= set(second),
                timeout_s=SESSION_TIMEOUT_MS / 1000,
                what="the messages put meanwhile",
            )
            assert not consumer.paused
            assert zk.client_id[0] == session
            admin = KazooClient(hosts=server.connect_string, timeout=10)
            admin.start(timeout=10)
            assert admin.exists(ids_path).ephemeralOwner == owner_before
            wait_for(lambda: admin.get(offset_path)[0].endswith(b"-%d" % (20 * 22)),
                     what="the commit after resuming")  # fmt: skip
            assert len(collector.messages) == 20
        finally:
            if admin is not None:
                admin.stop()
                admin.close()


def test_a_running_consumer_moves_to_the_slave_when_the_master_stops(tmp_path, zookeeper):
    """Goal: spec 6.5 for a running consumer: when the master goes, the cluster-changed
    rebalance points the fetchers at the slave with the same byte offsets. Method: the
    listener takes 50 messages and then fails every message (so the consumer keeps fetching
    the same offsets from the master); the master is stopped; once the fetch requests name the
    slave, the listener accepts again and every message must arrive exactly once."""
    cluster = make_cluster(
        tmp_path, zookeeper, {"numPartitions": 2, "unflushThreshold": 0},
        {"fall": {"numPartitions": 2}},
    )  # fmt: skip
    root, master, slave = cluster.root, cluster.master, cluster.slave
    factory = None
    try:
        master.start()
        slave.start()
        factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
        producer = factory.create_producer()
        producer.publish("fall")
        results = [producer.send_message(Message("fall", b"f%d" % n)) for n in range(200)]
        assert all(result.success for result in results)
        wait_until_identical(cluster)

        accepted: list[int] = []
        lock = threading.Lock()
        gate = threading.Event()

        def listener(message: Message) -> None:
            with lock:
                if len(accepted) >= 50 and not gate.is_set():
                    raise RuntimeError("not yet")  # the partition stays at this offset
                accepted.append(message.id)

        consumer = consumer_of(factory, "fall", "g-fall", listener, max_delay_fetch_ms=200,
                               max_fetch_retries=1_000_000, long_poll_ms=100)  # fmt: skip
        wait_for(lambda: len(accepted) >= 50, what="the first 50 messages")
        fetcher = consumer._fetcher  # noqa: SLF001
        assert {r.address.slave_id for r in fetcher.requests().values()} == {-1}
        master.stop()
        wait_for(lambda: {r.address.slave_id for r in fetcher.requests().values()} == {0},
                 30, "the fetchers to move to the slave")  # fmt: skip
        gate.set()
        sent = [result.msg_id for result in results]
        wait_for(lambda: len(accepted) >= len(sent), 30, "every message from the slave")
        assert sorted(accepted) == sorted(sent)  # each exactly once
    finally:
        if factory is not None:
            factory.shutdown()
        slave.stop()
        master.stop()


def test_shutdown_while_zookeeper_is_down_returns_promptly(tmp_path):
    """Goal: a consumer's shutdown never blocks on an unreachable ZooKeeper (its calls would
    wait for the connection forever). Method: a private ZooKeeper is stopped under a joined
    consumer; ``factory.shutdown()`` must return within the bound and leave no fetch thread."""
    with private_cluster(tmp_path, "down") as (server, _root, _broker, factory):
        consumer = consumer_of(factory, "down", "g-down", Collector(), max_delay_fetch_ms=200)
        server.stop()
        wait_for(lambda: consumer.paused, what="the consumer to pause")
        closer = threading.Thread(target=factory.shutdown)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "shutdown blocked on ZooKeeper"
        assert not [t for t in threading.enumerate() if t.name.startswith("meta-fetch")]
