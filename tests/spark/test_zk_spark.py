"""``ZkSparkReader.commit_group_offsets`` against a real ZooKeeper (the ``commitToGroup`` write)."""

from __future__ import annotations

import pytest

from meta.client.cluster import Partition
from meta.client.zk.spark import ZkSparkReader

pytestmark = pytest.mark.integration


def test_commit_creates_offset_nodes_in_the_msg_id_offset_form(zookeeper, zk_root, kazoo_client):
    with ZkSparkReader(zookeeper.connect_string, zk_root) as reader:
        reader.commit_group_offsets("g", "t", {Partition(1, 0): 120, Partition(2, 3): 0})
    path = "/consumers/g/offsets/t"
    assert kazoo_client.get(f"{path}/1-0")[0] == b"-1-120"
    assert kazoo_client.get(f"{path}/2-3")[0] == b"-1-0"


def test_commit_overwrites_and_reads_back(zookeeper, zk_root, kazoo_client):
    kazoo_client.create("/consumers/g/offsets/t/1-0", b"7-40", makepath=True)
    with ZkSparkReader(zookeeper.connect_string, zk_root) as reader:
        reader.commit_group_offsets("g", "t", {Partition(1, 0): 360})
        assert reader.group_offsets("g", "t") == {Partition(1, 0): 360}
