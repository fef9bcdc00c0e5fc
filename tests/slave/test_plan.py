"""What a slave copies, from raw ZooKeeper data (``meta.slave.plan``), and its start-up checks."""

from __future__ import annotations

import dataclasses

import pytest

from meta.client.cluster import BrokerAddress
from meta.config import SlaveConfig, ZkConfig
from meta.errors import ConfigError
from meta.slave.plan import NO_MASTER, check_slave_setup, master_view, num_parts


def test_num_parts_reads_the_topic_node_json_in_any_key_order():
    assert num_parts(b'{"broker":"0-m","numParts":4}') == 4


@pytest.mark.parametrize(
    "data", [b"4", b"{}", b'{"numParts":"4"}', b'{"numParts":true}', b'{"numParts":-1}', b"\xff"]
)
def test_num_parts_refuses_anything_but_an_integer_numparts(data):
    with pytest.raises(ValueError):
        num_parts(data)


def test_no_master_node_means_nothing_to_copy():
    assert master_view(None, {"t": b'{"numParts":2,"broker":"0-m"}'}) is NO_MASTER


def test_the_view_lists_every_partition_of_every_master_topic_sorted():
    view = master_view(
        b"meta://10.0.0.1:8123",
        {"zeta": b'{"numParts":1,"broker":"0-m"}', "alpha": b'{"numParts":2,"broker":"0-m"}'},
    )
    assert view.address == BrokerAddress("10.0.0.1", 8123)
    assert view.partitions == (("alpha", 0), ("alpha", 1), ("zeta", 0))
    assert view.problems == ()


def test_a_wildcard_section_registered_by_the_master_is_not_copied():
    view = master_view(b"meta://h:1", {"dyn-*": b'{"numParts":4,"broker":"0-m"}'})
    assert view.partitions == ()
    assert view.problems == ()


def test_an_unreadable_topic_node_is_left_out_and_named():
    view = master_view(b"meta://h:1", {"bad": b"x", "good": b'{"numParts":1,"broker":"0-m"}'})
    assert view.partitions == (("good", 0),)
    assert len(view.problems) == 1
    assert view.problems[0].startswith("topic bad:")


def test_an_unreadable_master_uri_means_no_master_with_a_problem():
    view = master_view(b"http://nope", {})
    assert view.address is None
    assert "unreadable master node" in view.problems[0]


class _Config:
    path = "/etc/meta/server.ini"

    def __init__(self, enabled: bool) -> None:
        self.zookeeper = ZkConfig(connect="zk:2181", enabled=enabled)


def test_a_slave_needs_zookeeper():
    with pytest.raises(ConfigError, match=r"zk.zkEnable=false: an async slave"):
        check_slave_setup(_Config(False), SlaveConfig(0, "g"), "slave.properties")


def test_a_slave_group_must_be_a_valid_consumer_group():
    slave = dataclasses.replace(SlaveConfig(0, "g"), slave_group="bad group")
    with pytest.raises(ConfigError, match=r"slave.properties: slaveGroup='bad group'"):
        check_slave_setup(_Config(True), slave, "slave.properties")


def test_a_sound_setup_passes():
    check_slave_setup(_Config(True), SlaveConfig(0, "meta-slave-group_0"), "slave.properties")
