"""A real broker process against a real ZooKeeper: nodes, payloads, restarts, clean stop."""

from __future__ import annotations

import json
import zlib

import pytest

from meta.protocol.commands import Put
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for


@pytest.fixture
def broker(tmp_path, zookeeper, zk_root):
    process = BrokerProcess(
        tmp_path,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 2000},
        topics={"test": {"numPartitions": 3}, "quiet": {"acceptPublish": "false"}, "dyn-*": {}},
    )
    yield process
    process.stop()


def node(client, path: str) -> bytes:
    data, _stat = client.get(path)
    return data


def test_nodes_and_payloads_are_exactly_the_specs(broker, kazoo_client):
    broker.start()
    uri = f"meta://127.0.0.1:{broker.port}".encode()
    assert node(kazoo_client, "/brokers/ids/0") == uri
    assert node(kazoo_client, "/brokers/ids/0/master") == uri
    assert kazoo_client.get("/brokers/ids/0/master")[1].ephemeralOwner != 0
    assert kazoo_client.get("/brokers/ids/0")[1].ephemeralOwner == 0
    checksum = zlib.crc32(broker.config_path.read_bytes())
    assert node(kazoo_client, "/brokers/ids/0/master_config_checksum") == b"%d" % checksum
    assert node(kazoo_client, "/brokers/topics/test/0-m") == b"3"
    for kind in ("topics-pub", "topics-sub"):
        payload = json.loads(node(kazoo_client, f"/brokers/{kind}/test/0-m"))
        assert payload == {"numParts": 3, "broker": "0-m"}


def test_accept_publish_false_leaves_the_topic_out_of_topics_pub(broker, kazoo_client):
    broker.start()
    assert kazoo_client.exists("/brokers/topics-sub/quiet/0-m")
    assert not kazoo_client.exists("/brokers/topics-pub/quiet/0-m")


def test_the_first_put_to_a_wildcard_topic_registers_it(broker, kazoo_client):
    broker.start()
    assert kazoo_client.exists("/brokers/topics-pub/dyn-*/0-m")  # Java registers it literally
    assert not kazoo_client.exists("/brokers/topics-pub/dyn-new/0-m")
    with broker.connect() as connection:
        assert connection.request(Put("dyn-new", 0, b"x", 0, 1)).code == 200
    wait_for(lambda: kazoo_client.exists("/brokers/topics-pub/dyn-new/0-m"), what="dyn-new")
    payload = json.loads(node(kazoo_client, "/brokers/topics-pub/dyn-new/0-m"))
    assert payload == {"numParts": 1, "broker": "0-m"}


def test_sigterm_removes_every_node_and_exits_cleanly(broker, kazoo_client):
    broker.start()
    assert broker.stop() == 0
    assert not kazoo_client.exists("/brokers/ids/0")
    for kind in ("topics", "topics-pub", "topics-sub"):
        assert not kazoo_client.exists(f"/brokers/{kind}/test/0-m")
    assert "stopped" in broker.log()


def test_a_broker_restarted_right_after_kill_9_comes_up_once_the_old_session_expired(
    broker, kazoo_client
):
    """Goal: DECISIONS 6. Method: kill -9 the broker, start it again at once; it must wait out
    its predecessor's ephemeral master node and then register under a new session."""
    broker.start()
    old_owner = kazoo_client.get("/brokers/ids/0/master")[1].ephemeralOwner
    broker.kill()
    assert kazoo_client.exists("/brokers/ids/0/master")  # the old session is still alive
    broker.start(timeout_s=60)
    new_owner = kazoo_client.get("/brokers/ids/0/master")[1].ephemeralOwner
    assert new_owner != old_owner
    assert json.loads(node(kazoo_client, "/brokers/topics-pub/test/0-m"))["numParts"] == 3
