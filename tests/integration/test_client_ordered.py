"""The ordered producer and the async producer against real ZooKeeper and real brokers.

Each test runs a private two-broker cluster (brokers 2 and 10, two partitions each) under a
ZooKeeper root of its own, and reads what the brokers stored with raw ``get`` requests. Every
wait polls a condition with a deadline; brokers and factories are always stopped.
"""

from __future__ import annotations

from meta.client import HashPartitionSelector, Message, MetaMessageSessionFactory
from meta.client.net.connection import BrokerConnection
from meta.client.produce.ordered import SENT_TO_LOCAL
from meta.protocol.commands import Data, Get
from meta.protocol.message import iter_messages
from tests.integration.broker_process import START_TIMEOUT_S
from tests.integration.client_helpers import make_root, wait_for, zk_config
from tests.integration.test_client_producer import launch_broker

TOPICS = {"ord": {"numPartitions": 2}, "oneway": {"numPartitions": 2}}
PARTITIONS_INFO = {"topic.num.ord": "2:2;10:2"}
FETCH_BYTES = 1 << 20


def read_partition(port: int, topic: str, partition: int) -> list[bytes]:
    """Every payload stored in ``topic`` partition ``partition`` of the broker on ``port``."""
    payloads: list[bytes] = []
    offset = 0
    with BrokerConnection("127.0.0.1", port) as raw:
        while True:
            reply = raw.request(Get(topic, "reader", partition, offset, FETCH_BYTES, 1))
            if not isinstance(reply, Data) or not reply.data:
                return payloads
            records = list(iter_messages(reply.data, offset))
            if not records:
                return payloads
            payloads.extend(record.payload for record in records)
            offset = records[-1].offset + records[-1].size


def start_cluster(tmp_path, zookeeper):
    """Brokers 2 and 10, started side by side; both are stopped if either does not serve."""
    root = make_root(zookeeper)
    brokers = {
        broker_id: launch_broker(
            tmp_path / f"broker{broker_id}", zookeeper, root, broker_id, TOPICS
        )
        for broker_id in (2, 10)
    }
    try:
        for broker in brokers.values():
            broker.wait_until_serving(START_TIMEOUT_S)
    except BaseException:
        for broker in brokers.values():
            broker.kill()
        raise
    return root, brokers


def key_on(producer, broker_id: int) -> str:
    return next(
        f"key-{n}"
        for n in range(1000)
        if producer.choose_partition(Message("ord", b"", key=f"key-{n}")).broker_id == broker_id
    )


def send_both(producer, keys: dict[str, str], start: int, count: int) -> dict[str, list]:
    results: dict[str, list] = {name: [] for name in keys}
    for number in range(start, start + count):
        for name, key in keys.items():
            message = Message("ord", f"{name}-{number}".encode(), key=key)
            results[name].append(producer.send_message(message, timeout_s=2.0))
    return results


def test_a_dead_brokers_key_goes_local_and_arrives_in_order_after_restart(tmp_path, zookeeper):
    """Goal: a key whose broker dies keeps its order and loses nothing; other keys flow.

    Method: key A lives on broker 10, key B on broker 2. 20 messages of each are sent, broker
    10 is killed with SIGKILL, 30 more of each are sent: A's must all be "send to local", B's
    must reach broker 2. Broker 10 restarts (waiting out its old ZooKeeper session); the
    backlog must drain, 10 more A messages follow, and broker 10's partition of A must
    hold A-0..A-59 in send order, each exactly once.
    """
    root, brokers = start_cluster(tmp_path, zookeeper)
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    try:
        producer = factory.create_ordered_producer(
            PARTITIONS_INFO, HashPartitionSelector(), str(tmp_path / "local"), 500
        )
        producer.publish("ord")
        wait_for(lambda: len(factory._view.snapshot("ord").partitions) == 4, what="partitions")
        keys = {"A": key_on(producer, 10), "B": key_on(producer, 2)}
        partition_a = producer.choose_partition(Message("ord", b"", key=keys["A"]))
        before = send_both(producer, keys, 0, 20)
        assert all(r.success and r.offset >= 0 for rs in before.values() for r in rs)
        brokers[10].kill()
        during = send_both(producer, keys, 20, 30)
        assert all(r.error_message == SENT_TO_LOCAL for r in during["A"])
        assert all(r.partition == partition_a for r in during["A"])
        assert all(r.success and r.offset >= 0 for r in during["B"])
        assert producer.backlog_size("ord", partition_a) == 30
        brokers[10].start()
        wait_for(lambda: producer.backlog_size("ord", partition_a) == 0, 60, "backlog drained")
        # The old session's nodes may vanish after the drain (partition briefly not live):
        # then these go local too, behind nothing, and drain again.
        after = send_both(producer, {"A": keys["A"]}, 50, 10)
        assert all((r.success or r.queued) and r.partition == partition_a for r in after["A"])
        wait_for(lambda: producer.backlog_size("ord", partition_a) == 0, 60, "backlog drained")
        stored = read_partition(brokers[10].port, "ord", partition_a.partition)
        assert [p for p in stored if p.startswith(b"A-")] == [b"A-%d" % n for n in range(60)]
    finally:
        factory.shutdown()
        for broker in brokers.values():
            broker.stop()


def test_5000_async_one_way_sends_all_arrive(tmp_path, zookeeper):
    """Goal: async one-way sends are pipelined and none is lost.

    Method: 5000 ``async_send_message`` calls (each returns at once with offset -1); raw gets
    over the four partitions must then find all 5000 distinct payloads.
    """
    root, brokers = start_cluster(tmp_path, zookeeper)
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    try:
        producer = factory.create_async_producer(
            window=20000, local_path=str(tmp_path / "async"), recover_interval_ms=500
        )
        producer.publish("oneway")
        wait_for(lambda: len(factory._view.snapshot("oneway").partitions) == 4, what="partitions")
        results = [producer.async_send_message(Message("oneway", b"m-%d" % n)) for n in range(5000)]
        assert all(result.queued and not result.success for result in results)
        expected = {b"m-%d" % n for n in range(5000)}

        def stored() -> list[bytes]:
            return [
                payload
                for broker in brokers.values()
                for partition in (0, 1)
                for payload in read_partition(broker.port, "oneway", partition)
            ]

        wait_for(lambda: len(stored()) >= 5000, 60, "5000 stored messages")
        assert producer.wait_idle(10)
        payloads = stored()
        assert set(payloads) == expected and len(payloads) == 5000
        assert all(read_partition(broker.port, "oneway", 0) for broker in brokers.values())
    finally:
        factory.shutdown()
        for broker in brokers.values():
            broker.stop()
