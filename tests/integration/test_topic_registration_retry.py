"""A topic created while ZooKeeper is away is registered once it is back (real processes).

Method: a broker with a wildcard topic section runs against its own ZooKeeper server. The
server is stopped for longer than the session timeout; meanwhile a put creates a new topic,
whose registration fails. The failure must be logged with a reason, and the topic's nodes
must exist within seconds of the server's return, without a broker restart.
"""

from __future__ import annotations

import re
import time

import pytest
from kazoo.client import KazooClient

from meta.protocol.commands import Put
from meta.protocol.message import checksum
from meta.server.broker_nodes import topic_paths
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for
from tests.integration.zookeeper import ZooKeeperServer

SESSION_TIMEOUT_MS = 4000
CONNECTION_TIMEOUT_MS = 2000
RETURN_WAIT_S = 15.0


@pytest.fixture
def zookeeper_server(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.stop()


def put(broker: BrokerProcess, topic: str, data: bytes) -> int:
    with broker.connect() as connection:
        command = Put(topic, 0, data, 0, connection.next_opaque(), checksum(data))
        return connection.request(command).code


def test_a_topic_created_during_an_outage_is_registered_when_zookeeper_returns(
    tmp_path, zookeeper_server
):
    broker = BrokerProcess(
        tmp_path / "broker",
        topics={"wild-*": {}},
        zk_connect=zookeeper_server.connect_string,
        zk={
            "zk.zkSessionTimeoutMs": SESSION_TIMEOUT_MS,
            "zk.zkConnectionTimeoutMs": CONNECTION_TIMEOUT_MS,
        },
    ).start()
    try:
        assert put(broker, "wild-before", b"a") == 200
        zookeeper_server.stop()
        # The outage itself must outlast the session timeout: that is the fault under test.
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
        assert put(broker, "wild-new", b"b") == 200
        failed = wait_for(
            lambda: re.search(
                r"could not register topic wild-new in ZooKeeper: (\S+)", broker.log()
            ),
            timeout_s=CONNECTION_TIMEOUT_MS / 1000 + 20,
            what="the failed registration to be logged",
        )
        assert failed.group(1)  # a reason, never empty
        zookeeper_server.restart()
        returned = time.monotonic()
        admin = KazooClient(hosts=zookeeper_server.connect_string, timeout=10)
        admin.start(timeout=10)
        try:
            paths = topic_paths("/meta", "wild-new", "0-m")
            wait_for(
                lambda: all(admin.exists(path) for path in paths),
                timeout_s=RETURN_WAIT_S,
                what="the new topic's nodes",
            )
            assert time.monotonic() - returned < RETURN_WAIT_S
            assert all(admin.exists(path) for path in topic_paths("/meta", "wild-before", "0-m"))
        finally:
            admin.stop()
            admin.close()
    finally:
        broker.stop()
