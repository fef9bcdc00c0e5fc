"""``facts``' topics: every configured topic is listed, with its configured partitions
empty until their first put makes their stores (Java makes stores lazily)."""

from __future__ import annotations

import pytest

from meta.status import facts
from tests.dashboard.fakes import FakeBroker, FakePartition


def test_a_configured_topic_without_stores_is_listed_with_its_partitions_and_no_message():
    written = FakePartition("test", 0, message_count=3, byte_count=75)
    broker = FakeBroker(partitions=[written], configured={"orders": 2, "test": 1})
    topics = {topic["topic"]: topic for topic in facts.topics_facts(broker)}
    assert sorted(topics) == ["orders", "test"]
    assert (topics["orders"]["partitions"], topics["orders"]["messages"]) == (2, 0)
    assert topics["orders"]["bytes"] == 0
    assert (topics["test"]["partitions"], topics["test"]["messages"]) == (1, 3)


def test_a_configured_topic_without_stores_has_a_page_of_empty_partitions():
    broker = FakeBroker(configured={"orders": 2})
    topic = facts.topic_facts(broker, "orders")
    assert [(p["partition"], p["store"], p["messages"]) for p in topic["partitions"]] == [
        (0, False, 0),
        (1, False, 0),
    ]


def test_a_partition_written_once_is_the_stores_and_the_rest_stay_empty():
    broker = FakeBroker(partitions=[FakePartition("orders", 1)], configured={"orders": 2})
    assert facts.unwritten_partitions(broker) == [("orders", 0)]
    stores = [p["store"] for p in facts.topic_facts(broker, "orders")["partitions"]]
    assert stores == [False, True]


def test_a_topic_neither_configured_nor_stored_is_unknown_by_name():
    broker = FakeBroker(configured={"orders": 2})
    with pytest.raises(facts.UnknownTopicError, match="no topic nope"):
        facts.topic_facts(broker, "nope")


def test_the_average_size_is_bytes_per_message_and_none_without_messages():
    written = FakePartition("test", 0, message_count=3, byte_count=76)
    broker = FakeBroker(partitions=[written], configured={"orders": 2, "test": 1})
    averages = {topic["topic"]: topic["average_bytes"] for topic in facts.topics_facts(broker)}
    assert averages == {"orders": None, "test": 25}
