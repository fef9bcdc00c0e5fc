"""``MessageProducer``'s routing errors and its raising ``send``, over a stand-in view.

The stand-in ``View`` serves snapshots the test sets, and ``Pool`` hands out a connection
stand-in whose request completes at once with a reply the test chooses: no network.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import MappingProxyType

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.message import Message
from meta.client.produce.producer import MessageProducer
from meta.client.produce.selectors import RoundRobinPartitionSelector
from meta.errors import (
    BrokersUnavailableError,
    NoBrokerError,
    NoPartitionError,
    SendFailedError,
    TopicNotPublishedError,
    TopicNotServedError,
)

BROKER = BrokerAddress.parse_uri("meta://10.0.0.5:8123")


class Snapshot:
    def __init__(self, partitions=(), brokers=None) -> None:
        self.partitions = tuple(partitions)
        self.brokers = MappingProxyType(dict(brokers or {}))


class View:
    def __init__(self) -> None:
        self.snapshots: dict[str, Snapshot] = {}

    def publish(self, topic: str) -> None:
        self.snapshots.setdefault(topic, Snapshot())

    def unpublish(self, topic: str) -> None:
        pass

    def snapshot(self, topic: str) -> Snapshot:
        return self.snapshots.get(topic, Snapshot())

    def publish_path(self, topic: str) -> str:
        return f"/meta/brokers/topics-pub/{topic}"


class Connection:
    closed = False
    timeouts_total = 0

    def __init__(self, reply: tuple[int, bytes]) -> None:
        self.reply = reply

    def request(self, put, timeout_s, convert) -> Future:
        future: Future = Future()
        future.set_result(convert.from_result(*self.reply))
        return future


class Pool:
    def __init__(self) -> None:
        self.reply = (200, b"77 0 1024")

    def connect_quietly(self, address) -> None:
        pass

    def get(self, address) -> Connection:
        return Connection(self.reply)


def producer_with(view: View, pool: Pool | None = None) -> MessageProducer:
    return MessageProducer(pool or Pool(), RoundRobinPartitionSelector(), 1 << 20, view=view)


def served(view: View, topic: str, with_address: bool = True) -> None:
    view.snapshots[topic] = Snapshot([Partition(0, 0)], {0: BROKER} if with_address else {})


def test_an_unpublished_topic_says_to_call_publish():
    producer = producer_with(View())
    with pytest.raises(TopicNotPublishedError, match=r"producer\.publish\('orders'\)"):
        producer.send_message(Message("orders", b"x"))


def test_a_topic_no_broker_serves_names_the_zookeeper_path_and_the_config_fix():
    producer = producer_with(View())
    producer.publish("orders")
    with pytest.raises(TopicNotServedError) as caught:
        producer.send_message(Message("orders", b"x"))
    text = str(caught.value)
    assert "/meta/brokers/topics-pub/orders" in text
    assert "brokers seen serving it: none" in text and "[topic=orders]" in text


def test_brokers_gone_after_serving_the_topic_are_named_as_down():
    view = View()
    producer = producer_with(view)
    producer.publish("orders")
    served(view, "orders")
    assert producer.send_message(Message("orders", b"x")).success
    view.snapshots["orders"] = Snapshot()
    with pytest.raises(BrokersUnavailableError, match=r"down: .*0 \(meta://10\.0\.0\.5:8123\)"):
        producer.send_message(Message("orders", b"x"))


def test_a_partition_whose_broker_has_no_address_says_it_is_not_registered_yet():
    view = View()
    producer = producer_with(view)
    producer.publish("orders")
    served(view, "orders", with_address=False)
    with pytest.raises(BrokersUnavailableError, match="broker 0 .*not registered yet"):
        producer.send_message(Message("orders", b"x"))


def test_the_three_causes_have_three_texts_and_stay_no_partition_errors():
    view = View()
    producer = producer_with(view)
    texts = []
    for prepare in (lambda: None, lambda: producer.publish("t"), lambda: served(view, "t", False)):
        prepare()
        with pytest.raises(NoPartitionError) as caught:
            producer.send_message(Message("t", b"x"))
        texts.append(str(caught.value))
    assert len(set(texts)) == 3
    assert not any("aviable" in text for text in texts)


def test_a_missing_master_is_still_a_no_broker_error():
    assert issubclass(BrokersUnavailableError, NoBrokerError)


def test_send_returns_the_stored_result():
    view = View()
    producer = producer_with(view)
    producer.publish("orders")
    served(view, "orders")
    result = producer.send("orders", b"x", attribute="a")
    assert (result.success, result.partition, result.offset, result.msg_id) == (
        True,
        Partition(0, 0),
        1024,
        77,
    )


def test_send_raises_on_a_refused_put_where_send_message_returns_it():
    view, pool = View(), Pool()
    producer = producer_with(view, pool)
    producer.publish("orders")
    served(view, "orders")
    pool.reply = (500, b"disk full")
    assert producer.send_message(Message("orders", b"x")).error_message == "disk full"
    with pytest.raises(SendFailedError, match="disk full"):
        producer.send(Message("orders", b"x"))


def test_a_producer_is_a_context_manager_that_shuts_down():
    with producer_with(View()) as producer:
        producer.publish("orders")
    assert producer.published_topics == frozenset()
    with pytest.raises(Exception, match="shut down"):
        producer.publish("other")
