"""Partition and broker identifiers, ZooKeeper list rules, offsets and group names (zk spec)."""

import json
import logging
import socket

import pytest

from meta import local_address
from meta.client import cluster
from meta.client.cluster import (
    BrokerAddress,
    Partition,
    broadcast_group,
    consumer_id_string,
    consumer_partition_strings,
    format_offset,
    master_broker_ids,
    parse_offset,
    producer_partitions,
    validate_group,
    validate_topic,
)
from meta.errors import ClientError, InvalidGroupError, InvalidTopicError


def topic_node(num_parts: int, suffix: str) -> bytes:
    return json.dumps({"numParts": num_parts, "broker": suffix}).encode()


# --- Partition ---------------------------------------------------------------------------------


def test_partition_prints_as_broker_dash_partition():
    assert str(Partition(3, 12)) == "3-12"


def test_partition_parse_reads_broker_and_partition():
    assert Partition.parse("10-2") == Partition(10, 2)


def test_partition_parse_accepts_the_random_partition():
    assert Partition.parse("-1--1") == Partition(-1, -1)
    assert str(Partition(-1, -1)) == "-1--1"


@pytest.mark.parametrize("text", ["", "1", "1-", "-1", "a-1", "1-2-3", " 1-2", "1-m", "١-٢"])
def test_partition_parse_refuses_malformed_text(text):
    with pytest.raises(ClientError, match="malformed partition"):
        Partition.parse(text)


def test_partitions_order_numerically_by_broker_then_partition():
    partitions = [Partition(10, 0), Partition(2, 1), Partition(2, 0), Partition(0, 10)]
    assert sorted(partitions) == [
        Partition(0, 10),
        Partition(2, 0),
        Partition(2, 1),
        Partition(10, 0),
    ]


# --- BrokerAddress -----------------------------------------------------------------------------


def test_broker_uri_parse_reads_host_and_port_of_a_master():
    assert BrokerAddress.parse_uri("meta://10.0.0.5:8123") == BrokerAddress("10.0.0.5", 8123, -1)


def test_broker_uri_parse_reads_the_slave_id_query():
    address = BrokerAddress.parse_uri("meta://host-a:8123?slaveId=2")
    assert address == BrokerAddress("host-a", 8123, 2)
    assert address.is_slave


def test_broker_uri_parse_unbrackets_an_ipv6_host():
    address = BrokerAddress.parse_uri("meta://[fe80::1:2]:8123?slaveId=0")
    assert address == BrokerAddress("fe80::1:2", 8123, 0)


def test_broker_uri_property_brackets_ipv6_and_drops_the_query():
    assert BrokerAddress("::1", 8123, 1).uri == "meta://[::1]:8123"
    assert BrokerAddress("h", 9, 1).uri == "meta://h:9"


def test_broker_uri_round_trips_through_parse():
    for uri in ["meta://localhost:8123", "meta://[2001:db8::7]:1"]:
        assert BrokerAddress.parse_uri(uri).uri == uri


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "http://h:1",
        "meta://h",
        "meta://h:",
        "meta://:8123",
        "meta://h:0",
        "meta://h:65536",
        "meta://h:8x",
        "meta://::1:8123",
        "meta://[::1]8123",
        "meta://h:1?slaveId=x",
    ],
)
def test_broker_uri_parse_refuses_a_malformed_uri_and_names_it(uri):
    with pytest.raises(ClientError, match="malformed broker URI") as raised:
        BrokerAddress.parse_uri(uri)
    assert repr(uri) in str(raised.value)


# --- Partition lists ---------------------------------------------------------------------------


def test_producer_partitions_use_only_master_children_sorted_numerically():
    children = {
        "10-m": topic_node(1, "10-m"),
        "2-m": topic_node(11, "2-m"),
        "2-s1": topic_node(3, "2-s1"),
        "3-s0": topic_node(2, "3-s0"),
    }
    expected = [Partition(2, number) for number in range(11)] + [Partition(10, 0)]
    assert producer_partitions(children) == expected


def test_producer_partitions_skip_bad_json_with_a_warning(caplog):
    children = {"0-m": b"{not json", "1-m": topic_node(2, "1-m"), "2-m": b"4", "3-m": b""}
    with caplog.at_level(logging.WARNING, logger="meta.client"):
        assert producer_partitions(children) == [Partition(1, 0), Partition(1, 1)]
    assert "0-m" in caplog.text
    assert "2-m" in caplog.text


def test_producer_partitions_read_num_parts_regardless_of_key_order():
    children = {"0-m": b'{"broker":"0-m","numParts":2}'}
    assert producer_partitions(children) == [Partition(0, 0), Partition(0, 1)]


def test_master_broker_ids_are_the_sorted_ids_of_master_children():
    children = {"10-m": b"", "2-m": b"", "2-s0": b"", "x-m": b"", "3-m-m": b""}
    assert master_broker_ids(children) == [2, 10]


def test_consumer_partition_strings_include_slaves_and_sort_as_strings():
    children = {
        "0-m": topic_node(11, "0-m"),
        "0-s1": topic_node(11, "0-s1"),
        "2-m": topic_node(1, "2-m"),
        "10-s0": topic_node(1, "10-s0"),
    }
    assert consumer_partition_strings(children) == [
        "0-0", "0-1", "0-10", "0-2", "0-3", "0-4", "0-5", "0-6", "0-7", "0-8", "0-9", "10-0", "2-0",
    ]  # fmt: skip


def test_consumer_partition_strings_differ_from_the_producer_order():
    children = {"2-m": topic_node(1, "2-m"), "10-m": topic_node(1, "10-m")}
    assert consumer_partition_strings(children) == ["10-0", "2-0"]
    assert [str(p) for p in producer_partitions(children)] == ["2-0", "10-0"]


def test_consumer_partition_strings_keep_a_slave_only_broker():
    assert consumer_partition_strings({"4-s0": topic_node(2, "4-s0")}) == ["4-0", "4-1"]


def test_consumer_partition_strings_skip_bad_children(caplog):
    children = {"0-m": b"nope", "x-m": topic_node(1, "x-m"), "5": topic_node(1, "5")}
    with caplog.at_level(logging.WARNING, logger="meta.client"):
        assert consumer_partition_strings(children) == []
    assert "0-m" in caplog.text


# --- Offsets -----------------------------------------------------------------------------------


def test_format_offset_joins_msg_id_and_offset():
    assert format_offset(-6054433245132763136, 1048576) == "-6054433245132763136-1048576"
    assert format_offset(-1, 0) == "-1-0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-6054433245132763136-1048576", (-6054433245132763136, 1048576)),
        ("-1-0", (-1, 0)),
        ("42-7", (42, 7)),
        ("1024", (-1, 1024)),
    ],
)
def test_parse_offset_splits_at_the_last_dash_or_reads_a_bare_offset(text, expected):
    assert parse_offset(text) == expected


@pytest.mark.parametrize(
    "text", ["", "-", "5-", "a-1", "1-b", " 1-2", "1_0", "99999999999999999999"]
)
def test_parse_offset_refuses_malformed_text(text):
    with pytest.raises(ClientError, match="malformed offset"):
        parse_offset(text)


# --- Names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("character", list("~!#$%^&*()+=`'\",;/?[]<>.: "))
def test_validate_group_refuses_each_java_forbidden_character(character):
    with pytest.raises(InvalidGroupError) as raised:
        validate_group(f"my{character}group")
    assert repr(character) in str(raised.value)
    assert repr(f"my{character}group") in str(raised.value)


@pytest.mark.parametrize("group", ["", "   ", "\t"])
def test_validate_group_refuses_a_blank_group(group):
    with pytest.raises(InvalidGroupError, match="blank"):
        validate_group(group)


def test_validate_group_accepts_dashes_underscores_and_digits():
    validate_group("meta-example_2")


def test_broadcast_group_replaces_dots_and_colons_in_the_host():
    assert broadcast_group("meta-example", "192.168.1.10") == "meta-example-192-168-1-10"
    assert broadcast_group("g", "[fe80::1]") == "g-[fe80--1]"


def test_broadcast_group_defaults_to_the_local_host(monkeypatch):
    monkeypatch.setattr(cluster, "local_host", lambda: "10.1.2.3")
    assert broadcast_group("g") == "g-10-1-2-3"


def test_consumer_id_string_uses_an_explicit_consumer_id():
    assert consumer_id_string("group", "worker-1") == "group_worker-1"


def test_consumer_id_string_generates_host_pid_and_uuid(monkeypatch):
    monkeypatch.setattr(cluster, "local_host", lambda: "10.1.2.3")
    monkeypatch.setattr(cluster.os, "getpid", lambda: 4242)
    first = consumer_id_string("group", None)
    assert first.startswith("group_10.1.2.3-4242-")
    assert len(first.rsplit("4242-", 1)[1]) == 36
    assert consumer_id_string("group", None) != first


def test_broadcast_group_on_a_host_whose_name_resolves_to_loopback_follows_java(monkeypatch):
    """Java names the group after the first non-loopback interface address, whatever
    /etc/hosts says about the host name (Debian maps it to 127.0.1.1)."""
    monkeypatch.setattr(
        local_address,
        "interface_addresses",
        lambda: {"lo": [(socket.AF_INET, "127.0.0.1")], "eth0": [(socket.AF_INET, "192.0.2.2")]},
    )
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(2, 1, 6, "", ("127.0.1.1", 0))])
    assert broadcast_group("g-bc") == "g-bc-192-0-2-2"
    assert consumer_id_string("g", None).startswith("g_192.0.2.2-")


def test_validate_topic_uses_the_broker_rule():
    validate_topic("orders.v1")
    with pytest.raises(InvalidTopicError):
        validate_topic("bad topic")
