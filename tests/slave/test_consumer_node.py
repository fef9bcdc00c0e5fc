"""``ConsumerNode`` against a recording stand-in for kazoo (the real ZooKeeper run is in
tests/integration/test_slave.py): when it writes, what, and after a lost session."""

from __future__ import annotations

import os

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from meta.config import ZkConfig
from meta.slave.consumer_node import ConsumerNode, ConsumerNodeError


class FakeKazoo:
    def __init__(self, zookeeper: ZkConfig) -> None:
        self.zookeeper = zookeeper
        self.calls: list[tuple] = []
        self.listeners: list = []
        self.nodes: dict[str, bytes] = {}
        self.fail: Exception | None = None

    def exists(self, path: str) -> bool:
        return path in self.nodes

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)

    def ensure_path(self, path: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(("ensure_path", path))

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> None:
        if self.fail is not None:
            raise self.fail
        assert ephemeral
        self.calls.append(("create", path, data))
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = data

    def set(self, path: str, data: bytes) -> None:
        self.calls.append(("set", path, data))
        self.nodes[path] = data

    def delete(self, path: str) -> None:
        self.calls.append(("delete", path))
        if path not in self.nodes:
            raise NoNodeError()
        del self.nodes[path]

    def stop(self) -> None:
        self.calls.append(("stop",))

    def close(self) -> None:
        self.calls.append(("close",))


@pytest.fixture
def node():
    clients: list[FakeKazoo] = []

    def factory(zookeeper):
        clients.append(FakeKazoo(zookeeper))
        return clients[-1]

    consumer = ConsumerNode(ZkConfig("127.0.0.1:2181", root="/r"), "copy-group", factory)
    consumer.clients = clients
    return consumer


def test_the_id_is_group_underscore_host_pid_uuid_under_the_groups_ids(node):
    group, _, rest = node.consumer_id.partition("_")
    host, pid, uuid = rest.split("-", 2)
    assert group == "copy-group" and host and int(pid) == os.getpid() and len(uuid) == 36
    assert node.path == f"/r/consumers/copy-group/ids/{node.consumer_id}"


def test_the_topics_are_written_comma_joined_once_until_they_change(node):
    assert node.write(["beta", "alpha", "beta"]) is True
    [client] = node.clients
    assert client.nodes == {node.path: b"alpha,beta"}
    assert node.write(["alpha", "beta"]) is False  # unchanged: ZooKeeper is not asked
    assert node.write(["alpha", "beta", "gamma"]) is True  # exists: rewritten with set
    assert client.nodes == {node.path: b"alpha,beta,gamma"}
    assert ("set", node.path, b"alpha,beta,gamma") in client.calls
    assert client.zookeeper.root == "/r"


def test_after_a_lost_session_the_node_is_created_again(node):
    node.write(["alpha"])
    [client] = node.clients
    del client.nodes[node.path]  # the ephemeral node went with the session
    for listener in client.listeners:
        listener(KazooState.LOST)
    assert node.write(["alpha"]) is True
    assert client.nodes == {node.path: b"alpha"}


def test_a_failed_write_is_reported_and_tried_again(node):
    node.write(["alpha"])
    [client] = node.clients
    client.fail = ConnectionLoss()
    with pytest.raises(ConsumerNodeError, match="cannot write"):
        node.write(["alpha", "beta"])
    client.fail = None
    assert node.write(["alpha", "beta"]) is True


def test_close_deletes_the_node_and_closes_the_client(node):
    node.write(["alpha"])
    node.close()
    [client] = node.clients
    assert client.nodes == {}
    assert client.calls[-3:] == [("delete", node.path), ("stop",), ("close",)]
    node.close()  # idempotent
