"""The dashboard's actions on a real broker: who may run them, and what they do.

The broker listens on 127.0.0.2 (``hostName``), so a client can connect from 127.0.0.2
(an address that is not the loopback address 127.0.0.1) or from 127.0.0.1.
"""

from __future__ import annotations

import http.client

import pytest

from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import Put
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_dashboard import dashboard_port

HOST = "127.0.0.2"
GROUP = "readers"


def post(port: int, path: str, source: str = "127.0.0.1", admin: bool = True) -> tuple:
    """``(status, body)`` of a POST to the broker's dashboard, sent from ``source``."""
    connection = http.client.HTTPConnection(HOST, port, timeout=10, source_address=(source, 0))
    try:
        headers = {"X-MetaQ-Admin": "1"} if admin else {}
        connection.request("POST", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def get_text(port: int, path: str) -> str:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().read().decode()
    finally:
        connection.close()


@pytest.fixture
def broker(tmp_path, zookeeper, zk_root):
    process = BrokerProcess(
        tmp_path / "broker",
        system={"hostName": HOST, "numPartitions": 2},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 4000},
    )
    process.start()
    yield process
    process.stop()


def put(broker: BrokerProcess, count: int) -> None:
    with BrokerConnection(HOST, broker.port) as connection:
        for index in range(count):
            data = b"message %d" % index
            reply = connection.request(Put("test", 0, data, 0, index, checksum=checksum(data)))
            assert reply.code == 200


SKIP = f"/topics/test/groups/{GROUP}/partitions/0/skip"


@pytest.mark.parametrize("path", ["/reload-config", SKIP, f"/api/v1{SKIP}"])
def test_a_post_without_the_admin_header_gets_403(broker, path):
    status, body = post(dashboard_port(broker), path, admin=False)
    assert status == 403
    assert "X-MetaQ-Admin" in body


@pytest.mark.parametrize("path", ["/reload-config", SKIP])
def test_a_post_from_another_address_than_127_0_0_1_gets_403(broker, path):
    assert post(dashboard_port(broker), path, source=HOST)[0] == 403


def test_reload_applies_a_new_topic_section_in_the_broker_and_zookeeper(broker, admin, zk_root):
    broker.config_path.write_text(broker.config_path.read_text() + "\n[topic=fresh]\n")
    port = dashboard_port(broker)
    assert post(port, "/reload-config", source=HOST)[0] == 403
    assert admin.exists(f"{zk_root}/brokers/topics-pub/fresh") is None
    assert post(port, "/reload-config") == (200, "Reload config successfully.")
    assert "fresh *Empty*" in get_text(port, "/stats/topics?format=json")
    assert admin.exists(f"{zk_root}/brokers/topics-pub/fresh") is not None


def test_a_reload_of_a_broken_file_answers_the_error_and_keeps_the_config(broker):
    broker.config_path.write_text(broker.config_path.read_text() + "\n[topic=x]\nnoSuchKey=1\n")
    status, body = post(dashboard_port(broker), "/reload-config")
    assert status == 200
    assert "noSuchKey" in body
    assert "x *Empty*" not in get_text(dashboard_port(broker), "/stats/topics?format=json")


def test_skip_commits_the_partition_end_for_the_group(broker, admin, zk_root):
    put(broker, 10)
    node = f"{zk_root}/consumers/{GROUP}/offsets/test/0-0"
    admin.create(node, b"-1-0", makepath=True)
    end = int(
        get_text(dashboard_port(broker), "/api/v1/topics/test")
        .split('"max_offset": ')[1]
        .split(",")[0]
    )
    assert end > 0
    assert post(dashboard_port(broker), SKIP) == (200, "success")
    assert admin.get(node)[0] == f"0-{end}".encode()


def test_skip_refuses_a_partition_that_a_consumer_owns(broker, admin, zk_root):
    put(broker, 3)
    node = f"{zk_root}/consumers/{GROUP}/offsets/test/0-0"
    admin.create(node, b"-1-0", makepath=True)
    admin.create(f"{zk_root}/consumers/{GROUP}/owners/test/0-0", b"consumer-7", makepath=True)
    status, body = post(dashboard_port(broker), SKIP)
    assert status == 200
    assert body == (
        "Could not skip pending messages,because the parition was owned by consumer-7,"
        "maybe you have to stop the consumers at first."
    )
    assert admin.get(node)[0] == b"-1-0"
