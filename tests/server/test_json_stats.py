"""``stats json:<item>``: one JSON document per item, framed as a plain ``result`` reply.

The broker runs on a ``task.Clock`` with an in-memory file layer and a manual flush executor
(STYLE 21); requests and replies go through ``BrokerProtocol`` on a ``StringTransport``, so
the golden bytes below are exactly what a client reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import encode
from meta.protocol.commands import Put, Stats
from meta.server.broker import Broker
from meta.server.json_stats import DOCUMENTS, render_json_stats
from meta.server.protocol import BrokerProtocol
from meta.status import facts
from meta.status.json_items import NAMES, PREFIX
from meta.store.manager import StoreManager
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config

STARTED_AT_S = 1000.0


@dataclass
class Harness:
    broker: Broker
    clock: Clock
    executor: ManualExecutor

    def exchange(self, request: bytes) -> bytes:
        """Send ``request`` on a fresh connection; return every byte the broker wrote back."""
        transport = StringTransport()
        protocol = BrokerProtocol(self.broker)
        protocol.makeConnection(transport)
        protocol.dataReceived(request)
        self.executor.run_all()
        return transport.value()


@pytest.fixture
def harness(tmp_path) -> Harness:
    clock = Clock()
    clock.advance(STARTED_AT_S)
    config = broker_config(
        str(tmp_path),
        topics=(
            topic_config("test", str(tmp_path), num_partitions=2),
            topic_config("idle", str(tmp_path), num_partitions=1),
        ),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    executor = ManualExecutor()
    store = StoreManager(config, clock, files=RecordingFiles(), executor=executor)
    broker = closing_broker(Broker(config, clock, store=store), clock, executor)
    broker.start(listen=False)
    return Harness(broker, clock, executor)


def put(harness: Harness, partition: int, data: bytes, opaque: int = 1) -> None:
    reply = harness.exchange(encode(Put("test", partition, data, 0, opaque)))
    assert reply.startswith(b"result 200 ")


def document(harness: Harness, name: str) -> dict:
    reply = harness.exchange(encode(Stats(PREFIX + name, 5)))
    header, _, body = reply.partition(b"\r\n")
    assert header == b"result 200 %d 5" % len(body)
    return json.loads(body)


def test_the_rejected_item_is_one_compact_json_object_in_a_result_frame(harness):
    reply = harness.exchange(b"stats json:rejected 7\r\n")
    body = (
        b'{"item":"rejected","max_message_size":1048576,'
        b'"put_too_large":0,"put_too_large_last":null}'
    )
    assert reply == b"result 200 %d 7\r\n" % len(body) + body


def test_the_transactions_item_without_transactions_is_an_empty_list(harness):
    reply = harness.exchange(b"stats json:transactions 12\r\n")
    assert reply == b'result 200 41 12\r\n{"item":"transactions","transactions":[]}'


def test_an_unknown_json_item_answers_400_naming_the_known_ones(harness):
    reply = harness.exchange(b"stats json:nope 3\r\n")
    text = (
        b"unknown stats item json:nope; known: json:general, json:topics, json:offsets, "
        b"json:slave, json:transactions, json:rejected"
    )
    assert reply == b"result 400 %d 3\r\n" % len(text) + text


def test_a_json_item_name_is_never_a_legal_topic_so_it_shadows_none(harness):
    assert not any(harness.broker.config.is_legal_topic(PREFIX + name) for name in NAMES)


def test_every_named_item_has_a_document_builder():
    assert tuple(DOCUMENTS) == NAMES


def test_offsets_are_the_dashboards_partition_facts(harness):
    put(harness, 0, b"a" * 10)
    put(harness, 1, b"b" * 20)
    found = document(harness, "offsets")
    assert found["item"] == "offsets"
    assert found["partitions"] == facts.partitions_facts(harness.broker)
    assert [(p["topic"], p["partition"], p["messages"]) for p in found["partitions"]] == [
        ("test", 0, 1),
        ("test", 1, 1),
    ]
    assert found["partitions"][0]["max_offset"] > found["partitions"][0]["min_offset"]


def test_topics_list_topics_with_stores_and_configured_ones_without(harness):
    put(harness, 0, b"x")
    put(harness, 0, b"y")
    found = document(harness, "topics")
    assert found["topics"] == facts.topics_facts(harness.broker)
    # Every configured partition, stored or not yet: test has 2, idle 1 (never written).
    assert [(t["topic"], t["partitions"], t["messages"]) for t in found["topics"]] == [
        ("idle", 1, 0),
        ("test", 2, 2),
    ]
    assert found["without_stores"] == ["idle"]


def test_general_holds_the_broker_facts_and_the_text_items_counters(harness):
    put(harness, 0, b"hello")
    harness.clock.advance(42)
    found = document(harness, "general")
    assert found["item"] == "general"
    assert found["broker_id"] == 0 and found["role"] == "master" and found["ready"] is True
    assert found["uptime_seconds"] == 42
    assert found["counters"]["cmd_put"] == 1
    assert set(found["counters"]) == set(facts.COUNTER_NAMES)
    assert (found["total_messages"], found["topics"]) == (1, 2)
    text = harness.exchange(b"stats  9\r\n").decode()
    assert "\r\ncmd_put 1\r\n" in text and "\r\ntopics 2\r\n" in text
    assert "\r\ntotal_messages 1\r\n" in text and "\r\nuptime 42\r\n" in text


def test_slave_on_a_master_says_its_role_and_has_no_rows(harness):
    assert document(harness, "slave") == {"item": "slave", "role": "master", "async_slave": []}


def test_rejected_counts_a_put_refused_for_its_size(harness):
    harness.broker.record_put_too_large("test", 1, 2_000_000)
    found = document(harness, "rejected")
    assert found["put_too_large"] == 1
    assert found["put_too_large_last"] == "test-1 2000000"


def test_the_text_slave_item_on_a_master_stays_a_topic_name(harness):
    """``slave`` is still read as a topic on a master, as on a Java broker; only ``json:``
    items are answered as documents."""
    text = harness.exchange(b"stats slave 4\r\n").decode()
    assert "\r\nSTATS\r\nslave\r\nresultCode 1\r\n" in text
    assert "{" not in text


def test_render_json_stats_takes_the_clock_it_is_given(harness):
    code, body = render_json_stats("json:general", harness.broker, 10.0, 25.5)
    assert code == 200
    assert json.loads(body)["uptime_seconds"] == 15.5
