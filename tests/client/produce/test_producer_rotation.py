"""A round-robin ``MessageProducer`` over stand-in brokers: a broker that refuses or fails a
put leaves the rotation and the put goes to the other one; a hash producer keeps failing.

The stand-in ``View`` of ``test_producer_errors`` serves one partition on each of two
brokers; the ``Pool`` here refuses connections to the brokers the test marks down, and its
connections fail or answer puts as the test says. No network.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.message import Message
from meta.client.produce.producer import MessageProducer
from meta.client.produce.rotation import SendRetryPolicy
from meta.client.produce.selectors import HashPartitionSelector, RoundRobinPartitionSelector
from meta.errors import BrokersUnavailableError, ClientError
from tests.client.produce.test_producer_errors import Snapshot, View

UP = BrokerAddress.parse_uri("meta://127.0.0.1:8001")
DOWN = BrokerAddress.parse_uri("meta://127.0.0.1:8002")
NO_PROBE = SendRetryPolicy(broker_retry_first_ms=60_000, broker_retry_max_ms=60_000)


class Connection:
    closed = False
    timeouts_total = 0

    def __init__(self, address: BrokerAddress, pool: Pool) -> None:
        self.address = address
        self.pool = pool

    def request(self, put, timeout_s, convert) -> Future:
        self.pool.puts.append(self.address)
        future: Future = Future()
        if self.address.uri in self.pool.failing:
            future.set_exception(ClientError(f"connection to broker {self.address.uri} lost"))
        else:
            future.set_result(convert.from_result(200, b"77 %d 1024" % put.partition))
        return future


class Pool:
    closed = False

    def __init__(self) -> None:
        self.down: set[str] = set()  # connections refused
        self.failing: set[str] = set()  # written puts fail (connection lost)
        self.puts: list[BrokerAddress] = []

    def connect_quietly(self, address) -> None:
        pass

    def get(self, address) -> Connection:
        if address.uri in self.down:
            raise ClientError(f"cannot connect to broker {address.uri}: refused")
        return Connection(address, self)


def producer_over(pool: Pool, selector=None) -> MessageProducer:
    view = View()
    view.snapshots["t"] = Snapshot([Partition(1, 0), Partition(2, 0)], {1: UP, 2: DOWN})
    producer = MessageProducer(
        pool, selector or RoundRobinPartitionSelector(), 1 << 20, view=view, retry=NO_PROBE
    )
    producer.publish("t")
    return producer


def test_a_refused_broker_leaves_the_rotation_and_every_send_succeeds():
    pool = Pool()
    pool.down.add(DOWN.uri)
    producer = producer_over(pool)

    results = [producer.send_message(Message("t", b"x")) for _ in range(6)]
    futures = [producer.send_message_async(Message("t", b"y")) for _ in range(6)]

    assert all(result.success for result in results)
    assert all(future.result(1).success for future in futures)
    assert set(pool.puts) == {UP}
    producer.shutdown()


def test_a_put_lost_with_its_connection_is_sent_again_by_send_message():
    pool = Pool()
    pool.failing.add(DOWN.uri)
    producer = producer_over(pool)

    results = [producer.send_message(Message("t", b"x")) for _ in range(4)]

    assert all(result.success and result.partition.broker_id == 1 for result in results)
    assert pool.puts.count(DOWN) == 1  # Tried once, then out of rotation.
    producer.shutdown()


def test_with_every_broker_out_a_send_fails_naming_them():
    pool = Pool()
    pool.down |= {UP.uri, DOWN.uri}
    producer = producer_over(pool)

    with pytest.raises(ClientError, match="cannot connect"):
        producer.send_message(Message("t", b"x"))
    with pytest.raises(BrokersUnavailableError, match="out of the producer's rotation") as caught:
        producer.send_message(Message("t", b"x"))
    assert UP.uri in str(caught.value) and DOWN.uri in str(caught.value)
    producer.shutdown()


def test_a_hash_producer_keeps_its_partition_and_fails():
    pool = Pool()
    pool.down.add(DOWN.uri)
    producer = producer_over(pool, HashPartitionSelector())
    keys = [key for key in (f"k{n}" for n in range(50)) if _hash_partition(key) == 1][:3]

    for key in keys:
        with pytest.raises(ClientError, match="cannot connect"):
            producer.send_message(Message("t", b"x", key=key))
    assert pool.puts == []
    producer.shutdown()


def _hash_partition(key: str) -> int:
    return (
        HashPartitionSelector()
        .get_partition("t", [Partition(1, 0), Partition(2, 0)], Message("t", b"", key=key))
        .broker_id
        - 1
    )
