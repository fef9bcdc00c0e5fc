"""The producer against a real ZooKeeper and real broker processes.

Most tests share one module cluster: brokers 2 and 10 (numeric order differs from string
order) with 2 partitions each, under a ZooKeeper root of their own. Tests that stop or add
brokers run their own. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
from kazoo.client import KazooState

from meta.client import (
    HashPartitionSelector,
    Message,
    MetaClientConfig,
    MetaLogHandler,
    MetaMessageSessionFactory,
    Partition,
)
from meta.client.net.connection import BrokerConnection
from meta.errors import ClientError, MessageTooLargeError, NoPartitionError
from meta.protocol.commands import Data, Get
from meta.protocol.message import pack_message
from tests.integration.broker_process import START_TIMEOUT_S, BrokerProcess, free_port
from tests.integration.client_helpers import WAIT_S, make_root, wait_for, zk_config
from tests.integration.zookeeper import expire_session, lose_connection

TOPICS = {name: {"numPartitions": 2} for name in ("rr", "bytes", "hash", "async", "spread", "logs")}


def launch_broker(directory, zookeeper, root: str, broker_id: int, topics=None) -> BrokerProcess:
    """The broker's process, started; ``wait_until_serving`` waits for it."""
    return BrokerProcess(
        directory,
        system={"brokerId": broker_id, "numPartitions": 2},
        topics=topics or TOPICS,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 4000},
    ).launch()


def start_broker(directory, zookeeper, root: str, broker_id: int, topics=None) -> BrokerProcess:
    broker = launch_broker(directory, zookeeper, root, broker_id, topics)
    broker.wait_until_serving(START_TIMEOUT_S)
    return broker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = make_root(zookeeper)
    brokers = {}
    try:
        for broker_id in (2, 10):  # side by side, then waited for
            directory = tmp_path_factory.mktemp(f"broker{broker_id}")
            brokers[broker_id] = launch_broker(directory, zookeeper, root, broker_id)
        for broker in brokers.values():
            broker.wait_until_serving(START_TIMEOUT_S)
        yield root, brokers
    finally:
        for broker in brokers.values():
            broker.stop()


@pytest.fixture
def factory(zookeeper, cluster):
    root, _brokers = cluster
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as opened:
        yield opened


def snapshot_of(factory: MetaMessageSessionFactory, topic: str):
    return factory._view.snapshot(topic)


def test_the_producer_sees_the_four_partitions_in_numeric_order(factory):
    producer = factory.create_producer()
    producer.publish("rr")
    expected = [Partition(2, 0), Partition(2, 1), Partition(10, 0), Partition(10, 1)]
    assert list(snapshot_of(factory, "rr").partitions) == expected
    assert factory.get_partitions_for_topic("rr") == expected
    assert sorted(snapshot_of(factory, "rr").brokers) == [2, 10]


def test_round_robin_starts_at_index_1_and_cycles_in_java_order(factory):
    producer = factory.create_producer()
    producer.publish("rr")
    results = [producer.send_message(Message("rr", b"m%d" % n)) for n in range(8)]
    assert all(result.success for result in results)
    order = [str(result.partition) for result in results]
    assert order == ["2-1", "10-0", "10-1", "2-0", "2-1", "10-0", "10-1", "2-0"]


def test_sent_messages_are_stored_byte_for_byte_at_the_returned_offset(factory, cluster):
    _root, brokers = cluster
    producer = factory.create_producer()
    producer.publish("bytes")
    messages = [
        Message("bytes", b"plain"),
        Message("bytes", b"with attribute", attribute="attr"),
        Message("bytes", b"", attribute=""),
        Message("bytes", bytes(range(256)) * 40),
    ]
    for message in messages:
        result = producer.send_message(message)
        assert result.success, result
        assert (message.id, message.partition, message.offset) == (
            result.msg_id,
            result.partition,
            result.offset,
        )
        payload, flag = message.payload_and_flag()
        expected = pack_message(result.msg_id, flag, payload)
        port = brokers[result.partition.broker_id].port
        with BrokerConnection("127.0.0.1", port) as raw:
            get = Get("bytes", "g", result.partition.partition, result.offset, 1 << 20, 1)
            reply = raw.request(get)
        assert isinstance(reply, Data)
        assert reply.data[: len(expected)] == expected


def test_the_hash_selector_puts_every_message_of_a_key_on_one_partition(factory):
    producer = factory.create_producer(HashPartitionSelector())
    producer.publish("hash")
    partitions_by_key = {}
    for number in range(40):
        key = f"key-{number % 8}"
        result = producer.send_message(Message("hash", b"%d" % number, key=key))
        assert result.success
        partitions_by_key.setdefault(key, set()).add(result.partition)
    assert all(len(partitions) == 1 for partitions in partitions_by_key.values())
    assert len(set().union(*partitions_by_key.values())) > 1


def test_20000_async_sends_complete_and_all_succeed(factory):
    producer = factory.create_producer()
    producer.publish("async")
    futures = [
        producer.send_message_async(Message("async", b"payload-%d" % n), timeout_s=30)
        for n in range(20000)
    ]
    results = [future.result(WAIT_S) for future in futures]
    assert all(result.success for result in results)
    offsets = {(str(result.partition), result.offset) for result in results}
    assert len(offsets) == 20000
    assert {str(result.partition) for result in results} == {"2-0", "2-1", "10-0", "10-1"}


def test_an_oversized_message_is_refused_before_any_broker_is_contacted():
    unused_port = free_port()  # nothing listens there: contacting it would be a ClientError
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{unused_port}", max_message_bytes=100)
    with MetaMessageSessionFactory(config) as factory:
        producer = factory.create_producer()
        with pytest.raises(MessageTooLargeError, match="101 bytes.*max_message_bytes 100"):
            producer.send_message(Message("test", b"x" * 101))
        with pytest.raises(MessageTooLargeError):  # the attribute counts too
            producer.send_message(Message("test", b"x" * 95, attribute="abc"))
        with pytest.raises(ClientError, match=f"127.0.0.1:{unused_port}"):
            producer.send_message(Message("test", b"x" * 100))


def test_invalid_messages_raise_typed_errors_before_sending(factory):
    producer = factory.create_producer()
    with pytest.raises(ClientError, match="blank"):
        producer.send_message(Message("", b"data"))
    with pytest.raises(ClientError, match="bytes"):
        producer.send_message(Message("rr", "text"))
    with pytest.raises(ClientError, match="blank"):
        producer.publish("  ")


def test_a_topic_never_published_has_no_partition(factory):
    producer = factory.create_producer()
    with pytest.raises(NoPartitionError, match=r"call producer\.publish\('rr'\)"):
        producer.send_message(Message("rr", b"x"))


def test_direct_mode_sends_to_the_server_url_and_the_broker_picks_the_partition(cluster):
    _root, brokers = cluster
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{brokers[10].port}")
    with MetaMessageSessionFactory(config) as factory:
        producer = factory.create_producer()
        producer.publish("rr")
        results = [producer.send_message(Message("rr", b"direct")) for _ in range(20)]
    assert all(result.success for result in results)
    assert {result.partition.broker_id for result in results} == {-1}
    assert {result.partition.partition for result in results} <= {0, 1}
    with MetaMessageSessionFactory(config) as factory:
        with pytest.raises(ClientError, match="direct mode"):
            factory.get_partitions_for_topic("rr")


def test_an_unreachable_zookeeper_fails_within_the_connection_timeout():
    before = set(threading.enumerate())
    config = MetaClientConfig(zk_connect="127.0.0.1:1", zk_connection_timeout_ms=2000)
    started = time.monotonic()
    with pytest.raises(ClientError, match="127.0.0.1:1"):
        MetaMessageSessionFactory(config)
    assert time.monotonic() - started < 5.0
    wait_for(lambda: set(threading.enumerate()) <= before, 10, "kazoo threads to end")


@pytest.mark.parametrize(
    "fields",
    [{}, {"zk_connect": "127.0.0.1:2181", "server_url": "meta://127.0.0.1:8123"}],
)
def test_a_config_needs_exactly_one_of_zk_connect_and_server_url(fields):
    with pytest.raises(ClientError, match="exactly one of zk_connect"):
        MetaClientConfig(**fields)


def socket_descriptors() -> set[str]:
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            fds.add(target)
    return fds


def test_factory_shutdown_leaves_no_thread_and_no_socket(zookeeper, cluster):
    root, _brokers = cluster
    threads_before = set(threading.enumerate())
    sockets_before = socket_descriptors()
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    producer = factory.create_producer()
    producer.publish("spread")
    futures = [producer.send_message_async(Message("spread", b"x")) for _ in range(100)]
    assert all(future.result(WAIT_S).success for future in futures)
    assert len(factory._pool.uris()) == 2
    factory.shutdown()
    factory.shutdown()  # idempotent
    wait_for(lambda: set(threading.enumerate()) <= threads_before, 10, "threads to end")
    assert socket_descriptors() <= sockets_before
    with pytest.raises(ClientError):
        producer.send_message(Message("spread", b"x"))


def test_brokers_leaving_and_joining_change_where_messages_go(tmp_path, zookeeper, zk_root):
    """Goal: spec §2.3 "when a broker disappears" and §2.1 child watches. Method: two brokers;
    SIGTERM one, wait until the producer's snapshot drops it and check every send lands on the
    other; start a third broker, wait until it appears and check sends reach it."""
    topics = {"moving": {"numPartitions": 2}}
    first = start_broker(tmp_path / "b1", zookeeper, zk_root, 1, topics)
    second = start_broker(tmp_path / "b2", zookeeper, zk_root, 2, topics)
    third = None
    try:
        with MetaMessageSessionFactory(zk_config(zookeeper, zk_root)) as factory:
            producer = factory.create_producer()
            producer.publish("moving")
            assert sorted(snapshot_of(factory, "moving").brokers) == [1, 2]
            second.stop()
            wait_for(lambda: sorted(snapshot_of(factory, "moving").brokers) == [1], what="drop")
            assert [p.broker_id for p in snapshot_of(factory, "moving").partitions] == [1, 1]
            assert factory._pool.uris() == [f"meta://127.0.0.1:{first.port}"]
            results = [producer.send_message(Message("moving", b"a")) for _ in range(6)]
            assert {r.partition.broker_id for r in results if r.success} == {1}
            assert all(result.success for result in results)
            third = start_broker(tmp_path / "b3", zookeeper, zk_root, 3, topics)
            wait_for(lambda: 3 in snapshot_of(factory, "moving").brokers, what="broker 3")
            results = [producer.send_message(Message("moving", b"b")) for _ in range(8)]
            assert all(result.success for result in results)
            assert {result.partition.broker_id for result in results} == {1, 3}
    finally:
        for broker in (first, second, third):
            if broker is not None:
                broker.stop()


def fake_broker(kazoo_client, broker_id: int, port: int, topic: str) -> None:
    """Register broker nodes by hand (no process): the view only reads ZooKeeper."""
    kazoo_client.create(
        f"/brokers/ids/{broker_id}/master", b"meta://127.0.0.1:%d" % port, makepath=True
    )
    kazoo_client.create(
        f"/brokers/topics-pub/{topic}/{broker_id}-m",
        b'{"numParts":1,"broker":"%d-m"}' % broker_id,
        makepath=True,
    )


def test_after_a_lost_session_the_view_rereads_everything(zookeeper, zk_root, kazoo_client):
    """Goal: a broker URI that changed while the session was lost is picked up, although the
    child names did not change (kazoo's ChildrenWatch alone would not call back). Method: fake
    nodes; change ids/7/master without a child event; expire the factory's session."""
    fake_broker(kazoo_client, 7, 1111, "fake")
    with MetaMessageSessionFactory(zk_config(zookeeper, zk_root)) as factory:
        factory.create_producer().publish("fake")
        assert snapshot_of(factory, "fake").brokers[7].port == 1111
        # No data watch (Java): only a child event or a new session re-reads the URI. Not
        # asserted here: a watch's first callback may still be on its way and re-read it.
        kazoo_client.set("/brokers/ids/7/master", b"meta://127.0.0.1:2222")
        expire_session(factory._zk_client)
        wait_for(lambda: snapshot_of(factory, "fake").brokers[7].port == 2222, what="re-read")
        # The child watch is armed again after the new session.
        fake_broker(kazoo_client, 8, 3333, "fake")
        wait_for(lambda: 8 in snapshot_of(factory, "fake").brokers, what="broker 8")
        assert factory._pool.uris() == ["meta://127.0.0.1:2222", "meta://127.0.0.1:3333"]


def test_a_suspended_connection_keeps_the_last_snapshot(zookeeper, zk_root, kazoo_client):
    fake_broker(kazoo_client, 7, 1111, "fake")
    with MetaMessageSessionFactory(zk_config(zookeeper, zk_root)) as factory:
        factory.create_producer().publish("fake")
        before = snapshot_of(factory, "fake")
        seen_while_suspended = []

        def listener(state):  # kazoo's connection thread: only read the snapshot
            if state == KazooState.SUSPENDED:
                seen_while_suspended.append(snapshot_of(factory, "fake"))

        factory._zk_client.add_listener(listener)
        lose_connection(factory._zk_client)
        factory._zk_client.remove_listener(listener)
        assert seen_while_suspended == [before]
        assert snapshot_of(factory, "fake") == before
        fake_broker(kazoo_client, 8, 3333, "fake")
        wait_for(lambda: 8 in snapshot_of(factory, "fake").brokers, what="broker 8")


def test_unpublishing_the_last_reference_releases_the_brokers(zookeeper, zk_root, kazoo_client):
    fake_broker(kazoo_client, 7, 1111, "fake")
    with MetaMessageSessionFactory(zk_config(zookeeper, zk_root)) as factory:
        one, two = factory.create_producer(), factory.create_producer()
        one.publish("fake")
        two.publish("fake")
        one.shutdown()
        assert factory._pool.uris() == ["meta://127.0.0.1:1111"]
        two.shutdown()
        assert factory._pool.uris() == []
        assert not snapshot_of(factory, "fake").partitions
        three = factory.create_producer()
        three.publish("fake")  # the old watch is reused
        assert factory._pool.uris() == ["meta://127.0.0.1:1111"]


def test_the_log_handler_sends_application_records_to_a_topic(factory):
    """MetaLogHandler with a real producer: every record arrives in the topic, formatted."""
    handler = MetaLogHandler(factory.create_producer(), "logs")
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("app.integration")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        for n in range(5):
            logger.info("event %d", n)
        wait_for(lambda: handler.sent == 5, what="5 records sent")
    finally:
        logger.removeHandler(handler)
        handler.close()
    stored = []
    for partition in factory.get_partitions_for_topic("logs"):
        result = factory.get("logs", partition, 0)
        stored += [message.data for message in result or []]
    assert sorted(stored) == [b"app.integration INFO event %d" % n for n in range(5)]
