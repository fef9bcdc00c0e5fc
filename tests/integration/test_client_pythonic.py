"""The Pythonic client against a real ZooKeeper and a real broker: poll, iteration, errors.

One module broker (id 1) under a ZooKeeper root of its own serves one-partition topics, so
"in order" means the order sent. Every test uses its own topic and group. Offsets are read
from ZooKeeper after the consumer shut down (its final commit). Waits are bounded.
"""

from __future__ import annotations

import logging
import re
import sys
import time

import pytest

from meta.client import ConsumerConfig, Message, MetaLogHandler, MetaMessageSessionFactory
from meta.errors import BrokersUnavailableError, TopicNotServedError
from tests.integration.client_helpers import broker_cluster, make_root, wait_for, zk_config
from tests.integration.test_client_producer import start_broker

# A thousand synchronous sends per test: the topics flush every 1000 messages, so a send
# does not wait for a group commit's fsync (what these tests check is the consumer's side).
TOPICS = {
    name: {"numPartitions": 1, "unflushThreshold": 1000}
    for name in ("polled", "iterated", "partial")
}
COUNT = 1000
HEADER_BYTES = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, broker_ids=(1,)) as (root, _b):
        yield root


@pytest.fixture
def factory(zookeeper, cluster):
    with MetaMessageSessionFactory(zk_config(zookeeper, cluster)) as factory:
        yield factory


def send_numbered(factory, topic: str, count: int) -> list[bytes]:
    sent = [b"%s-%d" % (topic.encode(), n) for n in range(count)]
    with factory.create_producer() as producer:
        producer.publish(topic)
        for data in sent:
            producer.send(topic, data)
    return sent


def committed(admin, root: str, group: str, topic: str) -> str:
    return admin.get(f"{root}/consumers/{group}/offsets/{topic}/1-0")[0].decode()


def offset_after(message: Message) -> str:
    return f"{message.id}-{message.offset + HEADER_BYTES + len(message.data)}"


def test_poll_delivers_1000_messages_in_order_and_commits_their_offsets(factory, admin, cluster):
    sent = send_numbered(factory, "polled", COUNT)
    received: list[Message] = []
    with factory.create_consumer(ConsumerConfig("g-polled", zk_sync_s=0.5)) as consumer:
        consumer.subscribe("polled")

        deadline = time.monotonic() + 60
        while len(received) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(timeout_s=1.0)
            if message is not None:
                received.append(message)
    assert [message.data for message in received] == sent
    assert committed(admin, cluster, "g-polled", "polled") == offset_after(received[-1])


def test_iteration_delivers_1000_messages_in_order_and_commits_their_offsets(
    factory, admin, cluster
):
    sent = send_numbered(factory, "iterated", COUNT)
    with factory.create_consumer(ConsumerConfig("g-iterated", zk_sync_s=0.5)) as consumer:
        consumer.subscribe("iterated")
        received = list(consumer.messages(timeout_s=20.0, max_messages=COUNT))
    assert [message.data for message in received] == sent
    assert committed(admin, cluster, "g-iterated", "iterated") == offset_after(received[-1])


def test_the_committed_offset_stops_at_the_last_message_returned(factory, admin, cluster):
    """Goal: fetched but unreturned messages are not committed. Method: 10 messages fit in
    one fetch; poll 3, shut down, check the offset node, and a new consumer starts at the 4th.
    """
    sent = send_numbered(factory, "partial", 10)
    config = ConsumerConfig("g-partial", zk_sync_s=0.5)
    with factory.create_consumer(config) as consumer:
        consumer.subscribe("partial")
        first = list(consumer.messages(timeout_s=20.0, max_messages=3))
    assert [message.data for message in first] == sent[:3]
    assert committed(admin, cluster, "g-partial", "partial") == offset_after(first[-1])
    with factory.create_consumer(config) as consumer:
        consumer.subscribe("partial")
        rest = list(consumer.messages(timeout_s=20.0, max_messages=7))
    assert [message.data for message in rest] == sent[3:]


class RecordingHandler(MetaLogHandler):
    def __init__(self, *args, **kwargs) -> None:
        self.errors: list[BaseException | None] = []
        super().__init__(*args, **kwargs)

    def handleError(self, record: logging.LogRecord) -> None:
        self.errors.append(sys.exc_info()[1])


def test_a_log_handler_on_an_unconfigured_topic_reaches_handle_error(factory):
    handler = RecordingHandler(factory.create_producer(), "nowhere")
    logger = logging.getLogger("app.pythonic.unconfigured")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.error("this record has no topic to go to")
        wait_for(lambda: handler.errors, what="handleError")
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert isinstance(handler.errors[0], TopicNotServedError)
    assert "nowhere" in str(handler.errors[0])


def test_a_stopped_broker_is_reported_as_down_with_its_address(tmp_path, zookeeper):
    root = make_root(zookeeper)
    broker = start_broker(tmp_path, zookeeper, root, 7, topics={"gone": {"numPartitions": 1}})
    try:
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            with factory.create_producer() as producer:
                producer.publish("gone")
                wait_for(lambda: factory.cluster_view.snapshot("gone").partitions)
                producer.send("gone", b"stored")
                broker.stop()
                wait_for(lambda: not factory.cluster_view.snapshot("gone").partitions)
                with pytest.raises(BrokersUnavailableError) as caught:
                    producer.send("gone", b"lost")
    finally:
        broker.stop()
    assert re.search(rf"7 \(meta://[^)]*:{broker.port}\)", str(caught.value))
