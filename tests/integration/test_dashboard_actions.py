"""The dashboard's actions on a real broker: who may run them, and what they do; the
security headers of every answer.

The broker listens on 127.0.0.2 (``hostName``), so a client can connect from 127.0.0.2
(an address that is not the loopback address 127.0.0.1) or from 127.0.0.1. Its
``[system] dashboardAdminTokenFile`` names a file holding ``TOKEN``, which ``post`` sends
unless told otherwise.
"""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from meta.client.net.connection import BrokerConnection
from meta.dashboard.actions import ACTIONS_OFF_TEXT
from meta.dashboard.server import CONTENT_SECURITY_POLICY
from meta.protocol.commands import Put, Stats
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_dashboard import dashboard_port

HOST = "127.0.0.2"
GROUP = "readers"


TOKEN = "5d1b7f3a9c2e4d6f8a0b1c3e5f7a9b2d"


def post(
    port: int, path: str, source: str = "127.0.0.1", admin: bool = True, token: str | None = TOKEN
) -> tuple:
    """``(status, body)`` of a POST to the broker's dashboard, sent from ``source``."""
    connection = http.client.HTTPConnection(HOST, port, timeout=10, source_address=(source, 0))
    try:
        headers = {"X-MetaQ-Admin": "1"} if admin else {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
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


def token_file(directory: Path) -> Path:
    path = directory / "dashboard.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def broker(tmp_path, zookeeper, zk_root):
    system = {"hostName": HOST, "numPartitions": 2, "dashboardAdminTokenFile": token_file(tmp_path)}
    process = BrokerProcess(
        tmp_path / "broker",
        system=system,
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


@pytest.mark.parametrize("token", [None, "", TOKEN[:-1] + "0", TOKEN + TOKEN])
def test_a_post_without_the_operator_token_gets_401_and_runs_nothing(broker, admin, zk_root, token):
    broker.config_path.write_text(broker.config_path.read_text() + "\n[topic=fresh]\n")
    node = f"{zk_root}/consumers/{GROUP}/offsets/test/0-0"
    put(broker, 3)
    admin.create(node, b"-1-0", makepath=True)
    port = dashboard_port(broker)
    for path in ("/reload-config", SKIP):
        status, body = post(port, path, token=token)
        assert status == 401
        assert "Authorization: Bearer" in body
    assert "fresh" not in get_text(port, "/stats/topics?format=json")
    assert admin.get(node)[0] == b"-1-0"


def test_without_a_token_file_actions_are_off_and_say_how_to_turn_them_on(tmp_path):
    process = BrokerProcess(tmp_path / "broker", system={"hostName": HOST})
    process.start()
    try:
        process.config_path.write_text(process.config_path.read_text() + "\n[topic=fresh]\n")
        port = dashboard_port(process)
        status, body = post(port, "/reload-config")
        config_page = get_text(port, "/config")
        stats = get_text(port, "/stats/topics?format=json")
        log = process.log()
    finally:
        process.stop()
    assert status == 403
    assert body == ACTIONS_OFF_TEXT
    assert "[system] dashboardAdminTokenFile=" in body
    assert "fresh" not in stats
    assert 'id="operator-off"' in config_page
    assert "dashboardAdminTokenFile" in config_page
    assert 'id="operator-token"' not in config_page
    assert "dashboard actions off: no [system] dashboardAdminTokenFile" in log


def test_a_token_file_other_users_can_read_turns_the_actions_off(tmp_path):
    path = token_file(tmp_path)
    path.chmod(0o644)
    process = BrokerProcess(
        tmp_path / "broker", system={"hostName": HOST, "dashboardAdminTokenFile": path}
    )
    process.start()
    try:
        status, body = post(dashboard_port(process), "/reload-config")
        log = process.log()
    finally:
        process.stop()
    assert status == 503
    assert f"chmod 600 {path}" in body
    assert f"dashboard actions are off until this is fixed: the operator token file {path}" in log


def test_the_token_is_never_in_stats_config_nor_on_a_page(broker):
    port = dashboard_port(broker)
    with BrokerConnection(HOST, broker.port) as connection:
        config = connection.request(Stats("config")).body.decode()
    assert "dashboardAdminTokenFile=" in config
    for path in ("/config", "/", "/static/dashboard.js", "/java-properties", "/stats/config"):
        assert TOKEN not in get_text(port, path), path
    assert TOKEN not in config


SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
EVERY_KIND = [
    ("GET", "/", 200),
    ("HEAD", "/topics", 200),
    ("GET", "/topics/test", 200),
    ("GET", "/api/v1/broker", 200),
    ("GET", "/topics?format=json", 200),
    ("GET", "/metrics", 200),
    ("GET", "/healthz", 200),
    ("GET", "/readyz", 200),
    ("GET", "/static/dashboard.js", 200),
    ("GET", "/static/dashboard.css", 200),
    ("GET", "/nothing", 404),
    ("GET", "/topics/nothing", 404),
    ("GET", "/stats/reset", 405),
    ("PUT", "/topics", 405),
    ("OPTIONS", "/reload-config", 405),
    ("POST", "/nothing", 404),
]


def test_every_answer_carries_the_security_headers(broker):
    port = dashboard_port(broker)
    answers = [(method, path, expected) for method, path, expected in EVERY_KIND]
    seen = []
    for method, path, expected in answers:
        seen.append((method, path, expected, request_headers(port, method, path)))
    seen.append(("POST", "/reload-config", 401, request_headers(port, "POST", "/reload-config")))
    for method, path, expected, (status, headers) in seen:
        assert status == expected, (method, path, status)
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (method, path, name)


def request_headers(port: int, method: str, path: str) -> tuple[int, dict[str, str]]:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.request(method, path, headers={"X-MetaQ-Admin": "1"})
        response = connection.getresponse()
        response.read()
        return response.status, dict(response.getheaders())
    finally:
        connection.close()
