"""``meta-admin`` reads ``stats json:<item>`` and falls back to the text items.

Two ways round: against a raw-socket broker that answers only text, as a Java broker does
(``tests.admin.text_broker``), the tools ask one JSON item, see text, and read the text items;
against the admin cluster's metaq-py brokers they read the JSON documents, and what they make
of them equals what they make of the same broker's text items.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from meta.admin.client import AdminClient, BrokerRefusedError
from meta.admin.cluster import general_block, rejected_puts, topic_rows
from meta.admin.reads import partition_stats, stats_document
from meta.admin.slaves import lag_rows
from meta.admin.tx import live_transactions
from tests.admin.test_admin_cluster import put
from tests.admin.text_broker import TextOnlyBroker, stats_body

JAVA_GENERAL = stats_body(
    "pid 4242",
    "broker_id 7",
    "port 8123",
    "uptime 60",
    "version 1.4.6.2",
    "slave false",
    "curr_connections 1",
    "threads 30",
    "cmd_put 5",
    "total_messages 5",
    "topics 1",
    "config_checksum 99",
)
JAVA_TOPICS = stats_body(
    "meta-test partitions 2 message_count 5 message_bytes 120 accept_publish true "
    "accept_subscribe true",
    "empty *Empty*",
)
JAVA_OFFSETS = stats_body(
    "meta-test part 0 min_offset 0 max_offset 80", "meta-test part 1 min_offset 0 max_offset 40"
)


@pytest.fixture
def java_broker() -> Iterator[TextOnlyBroker]:
    broker = TextOnlyBroker({"": JAVA_GENERAL, "topics": JAVA_TOPICS, "offsets": JAVA_OFFSETS})
    yield broker
    broker.close()


def client_of(broker: TextOnlyBroker) -> AdminClient:
    return AdminClient(("127.0.0.1", broker.port))


# --- a broker that answers only text ---------------------------------------------------------


@pytest.mark.integration
def test_a_text_answer_to_a_json_item_means_no_json_and_is_not_asked_again(java_broker):
    with client_of(java_broker) as client:
        assert stats_document(client, "general") is None
        assert stats_document(client, "topics") is None
        assert client.answers_json_stats is False
    assert java_broker.asked == ["json:general"]


@pytest.mark.integration
def test_stats_of_a_text_only_broker_parses_its_text_items(java_broker, cli):
    status, out, err = cli("stats", java_broker.address, "--topics", "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert document["general"]["broker_id"] == 7 and document["general"]["slave"] is False
    assert "rejected" not in document  # a Java broker has no such item
    assert document["topics"] == [
        {
            "topic": "meta-test",
            "partitions": 2,
            "message_count": 5,
            "message_bytes": 120,
            "accept_publish": True,
            "accept_subscribe": True,
        },
        {
            "topic": "empty",
            "partitions": 0,
            "message_count": None,
            "message_bytes": None,
            "accept_publish": None,
            "accept_subscribe": None,
        },
    ]
    assert java_broker.asked == ["json:general", "", "rejected", "topics"]


@pytest.mark.integration
def test_offsets_of_a_text_only_broker_come_from_stats_offsets(java_broker):
    with client_of(java_broker) as client:
        found = partition_stats(client)
    assert sorted((key, stats.max_offset) for key, stats in found.items()) == [
        (("meta-test", 0), 80),
        (("meta-test", 1), 40),
    ]
    assert java_broker.asked == ["json:offsets", "offsets"]


@pytest.mark.integration
def test_a_text_only_slave_is_read_from_its_stats_slave_lines():
    line = "t part 0 slave_end 10 master_end 30 lag_bytes 20 lag_seconds 2 state copying"
    broker = TextOnlyBroker({"slave": stats_body(line)})
    try:
        with client_of(broker) as client:
            rows = lag_rows(client)
    finally:
        broker.close()
    assert rows == [
        {
            "topic": "t",
            "partition": 0,
            "slave_end": 10,
            "master_end": 30,
            "lag_bytes": 20,
            "lag_seconds": 2,
            "state": "copying",
        }
    ]


@pytest.mark.integration
def test_a_java_broker_has_no_live_transactions_item(java_broker):
    with client_of(java_broker) as client:
        assert live_transactions(client) is None
    assert java_broker.asked == ["json:transactions", "transactions"]


@pytest.mark.integration
def test_an_answer_that_is_neither_json_nor_text_is_a_refusal():
    broker = TextOnlyBroker({"json:general": b"[1, 2]"})
    try:
        with client_of(broker) as client, pytest.raises(BrokerRefusedError, match="json:general"):
            stats_document(client, "general")
    finally:
        broker.close()


# --- a metaq-py broker: JSON, and the same reading as its text items ---------------------------


@pytest.fixture
def broker_clients(admin_cluster) -> Iterator[tuple[AdminClient, AdminClient]]:
    """Two connections to broker 1: one reads JSON, one is told the broker has none."""
    address = ("127.0.0.1", admin_cluster.broker(1).port)
    with AdminClient(address) as json_client, AdminClient(address) as text_client:
        text_client.answers_json_stats = False
        yield json_client, text_client


def test_the_general_block_from_json_equals_the_text_items(broker_clients):
    json_client, text_client = broker_clients
    from_json = dict(general_block(json_client))
    from_text = dict(general_block(text_client))
    assert json_client.answers_json_stats is True
    assert sorted(from_json) == sorted(from_text)
    moving = ("uptime", "threads", "curr_connections")
    assert {k: v for k, v in from_json.items() if k not in moving} == {
        k: v for k, v in from_text.items() if k not in moving
    }
    assert abs(int(from_json["uptime"]) - int(from_text["uptime"])) <= 1


def test_rejected_topics_and_offsets_from_json_equal_the_text_items(broker_clients, factory):
    put(factory, "orders", [b"json-1", b"json-2"])
    json_client, text_client = broker_clients
    assert rejected_puts(json_client) == rejected_puts(text_client)
    assert rejected_puts(json_client)[0][0] == "put_too_large"
    from_json = {row["topic"]: row for row in topic_rows(json_client)}
    from_text = {row["topic"]: row for row in topic_rows(text_client)}
    assert sorted(from_json) == sorted(from_text)
    # A configured topic without stores: Java's text says only *Empty*; the JSON item
    # has its configured partitions, empty.
    assert from_text.pop("json-empty") == {
        **dict.fromkeys(from_text["orders"]),
        "topic": "json-empty",
        "partitions": 0,
    }
    empty = from_json.pop("json-empty")
    assert (empty["partitions"], empty["message_count"], empty["message_bytes"]) == (1, 0, 0)
    # Java counts a topic's stores; the JSON item its partitions, configured or stored.
    assert all(from_json[k]["partitions"] >= v["partitions"] for k, v in from_text.items())
    assert {k: {**v, "partitions": 0} for k, v in from_json.items() if v["message_count"]} == {
        k: {**v, "partitions": 0} for k, v in from_text.items() if v["message_count"]
    }
    assert partition_stats(json_client) == partition_stats(text_client)
    assert json_client.answers_json_stats is True


def test_live_transactions_from_json_equal_the_text_item(broker_clients):
    json_client, text_client = broker_clients
    assert live_transactions(json_client) == live_transactions(text_client) == {}


def test_a_master_is_not_read_as_a_slave(broker_clients):
    json_client, _ = broker_clients
    with pytest.raises(BrokerRefusedError, match="is a master, not a slave"):
        lag_rows(json_client)
