"""Consumer and producer checks that need no broker: the per-factory subscription rule,
direct-mode consumer configuration and ``MessageTooLargeError`` being a client error.

Direct-mode factories here point at a closed port: nothing in these tests may connect.
"""

from __future__ import annotations

import pytest

from meta.client import ConsumerConfig, Message, MetaClientConfig, MetaMessageSessionFactory
from meta.errors import (
    ClientClosedError,
    ClientError,
    InternalServerError,
    MessageTooLargeError,
)
from tests.integration.broker_process import free_port


@pytest.fixture
def factory():
    # A port nobody listens on: any connect would fail, so a test passing proves none happened.
    config = MetaClientConfig(server_url=f"meta://127.0.0.1:{free_port()}", max_message_bytes=100)
    with MetaMessageSessionFactory(config) as session:
        yield session


def test_message_too_large_is_a_client_error_raised_before_any_connect(factory):
    assert issubclass(MessageTooLargeError, ClientError)
    assert not issubclass(MessageTooLargeError, InternalServerError)
    producer = factory.create_producer()
    with pytest.raises(MessageTooLargeError, match="101 bytes") as caught:
        producer.send_message(Message("t", b"x" * 101))
    assert isinstance(caught.value, ClientError)
    with pytest.raises(ClientError):  # the same error through the future API
        producer.send_message_async(Message("t", b"x" * 101))


def test_one_consumer_cannot_subscribe_a_topic_twice(factory):
    consumer = factory.create_consumer(ConsumerConfig("g1", partition="0-0"))
    consumer.subscribe("orders", 1024, lambda message: None)
    with pytest.raises(ClientError, match="topic orders .*group g1"):
        consumer.subscribe("orders", 1024, lambda message: None)


def test_a_group_cannot_subscribe_a_topic_twice_in_one_factory(factory):
    first = factory.create_consumer(ConsumerConfig("g2", partition="0-0"))
    first.subscribe("orders", 1024, lambda message: None)
    second = factory.create_consumer(ConsumerConfig("g2", partition="0-1"))
    with pytest.raises(ClientError, match="topic orders is already subscribed by group g2"):
        second.subscribe("orders", 1024, lambda message: None)
    second.subscribe("invoices", 1024, lambda message: None)  # another topic is fine
    other_group = factory.create_consumer(ConsumerConfig("g3", partition="0-0"))
    other_group.subscribe("orders", 1024, lambda message: None)  # and another group
    first.shutdown()  # releases the topic
    second.subscribe("orders", 1024, lambda message: None)


def test_two_factories_do_not_share_the_rule():
    configs = [MetaClientConfig(server_url=f"meta://127.0.0.1:{free_port()}") for _ in range(2)]
    with MetaMessageSessionFactory(configs[0]) as one, MetaMessageSessionFactory(configs[1]) as two:
        for session in (one, two):
            consumer = session.create_consumer(ConsumerConfig("g4", partition="0-0"))
            consumer.subscribe("orders", 1024, lambda message: None)


def test_direct_mode_needs_the_partitions_to_read(factory):
    with pytest.raises(ClientError, match="ConsumerConfig.partition"):
        factory.create_consumer(ConsumerConfig("g5"))


@pytest.mark.parametrize("text", ["", "x", "0-", "0-a,0-1", " , "])
def test_a_malformed_partition_list_is_refused_by_the_config(text):
    with pytest.raises(ClientError):
        ConsumerConfig("g6", partition=text)


def test_a_partition_list_is_parsed_sorted_and_deduplicated():
    from meta.client.cluster import Partition
    from meta.client.consume.direct import parse_partitions

    assert parse_partitions("1-0, 0-2,0-10,0-2") == [
        Partition(0, 2),
        Partition(0, 10),
        Partition(1, 0),
    ]


def test_poll_needs_a_topic_subscribed_without_a_listener(factory):
    consumer = factory.create_consumer(ConsumerConfig("g-poll", partition="0-0"))
    consumer.subscribe("orders", 1024, lambda message: None)
    with pytest.raises(ClientError, match=r"consumer\.subscribe\(topic\)"):
        consumer.poll(0.01)


def test_a_consumer_is_a_context_manager_and_poll_refuses_after_it(factory):
    with factory.create_consumer(ConsumerConfig("g-with", partition="0-0")) as consumer:
        consumer.subscribe("orders")
    with pytest.raises(ClientClosedError):
        consumer.poll(0.01)
    with pytest.raises(ClientClosedError):
        next(consumer.messages(0.01))
