"""What ``docs/security.md`` says, checked against a real broker process.

The broker listens on 127.0.0.1 (``hostName``). A client on "another host" is played by a
connection from the source address 127.0.0.2, which the broker's operator rule
(``meta.operator_access``) does not trust; an operator connects from 127.0.0.1.
"""

from __future__ import annotations

import http.client
import socket

import pytest

from meta.client.net.connection import BrokerConnection
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Get, Put, Result, Stats, Transaction
from meta.protocol.message import checksum, iter_messages
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_dashboard import dashboard_port

TOPIC = "secure"
OTHER_HOST = "127.0.0.2"
QUALIFIER = "security"


DASHBOARD_TOKEN = "c4f1e8a2b7d3906e5a1f2c8b4d7e9a03"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("security")
    token_file = directory / "dashboard.token"
    token_file.write_text(DASHBOARD_TOKEN + "\n")
    token_file.chmod(0o600)
    system = {"dashboardAdminTokenFile": token_file}
    process = BrokerProcess(directory, topics={TOPIC: {}}, system=system).start()
    yield process
    process.stop()


class Client:
    """A connection from a chosen source address, one request at a time."""

    def __init__(self, broker: BrokerProcess, source: str, session: str) -> None:
        self.sock = socket.create_connection(
            ("127.0.0.1", broker.port), timeout=10, source_address=(source, 0)
        )
        self.decoder = Decoder()
        self.session = session
        self.opaque = 0

    def request(self, command_of_opaque) -> object:
        self.opaque += 1
        self.sock.sendall(encode(command_of_opaque(self.opaque)))
        while (reply := self.decoder.next_command()) is NEED_DATA:
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.decoder.receive_data(data)
        assert reply.opaque == self.opaque
        return reply

    def tx(self, key: str, type_: str, qualifier: str | None = None) -> Result:
        return self.request(lambda o: Transaction(key, self.session, type_, o, 0, qualifier))

    def prepare_branch(self, key: str, data: bytes) -> None:
        assert self.tx(key, "BEGIN").code == 200
        put = self.request(lambda o: Put(TOPIC, 0, data, 0, o, checksum(data), key))
        assert put.code == 200, put
        assert self.tx(key, "PREPARE").body == b"0"

    def close(self) -> None:
        self.sock.close()


def stored(broker: BrokerProcess) -> list[bytes]:
    with BrokerConnection("127.0.0.1", broker.port) as connection:
        reply = connection.request(Get(TOPIC, "g", 0, 0, 1 << 20, connection.next_opaque()))
    if isinstance(reply, Result):
        return []
    return [message.payload for message in iter_messages(reply.data)]


def test_stats_config_gives_any_client_the_server_ini_byte_for_byte(broker):
    client = Client(broker, OTHER_HOST, "stranger")
    try:
        reply = client.request(lambda o: Stats("config", o))
    finally:
        client.close()
    assert (reply.code, reply.body) == (200, broker.config_path.read_bytes())


def test_any_client_recovers_and_commits_a_branch_another_connection_prepared(broker):
    """Goal: XA recovery and completion are open to every client. Method: one connection
    prepares a branch and closes; a client from another address lists it with RECOVER
    and commits it; the message is then served."""
    key = f"XID:1:0a:01:{QUALIFIER}"
    owner = Client(broker, "127.0.0.1", "owner")
    owner.prepare_branch(key, b"prepared by the owner")
    owner.close()
    stranger = Client(broker, OTHER_HOST, "stranger")
    try:
        assert stranger.tx("null", "RECOVER", QUALIFIER).body.split(b"\r\n") == [key.encode()]
        assert stranger.tx(key, "COMMIT_TWO_PHASE").code == 200
    finally:
        stranger.close()
    assert b"prepared by the owner" in stored(broker)


def test_heuristic_commands_are_refused_from_another_host_and_taken_from_the_operator(broker):
    key = f"XID:1:0a:02:{QUALIFIER}"
    owner = Client(broker, "127.0.0.1", "owner")
    try:
        owner.prepare_branch(key, b"finished by the operator")
    finally:
        owner.close()
    stranger = Client(broker, OTHER_HOST, "stranger")
    try:
        refused = stranger.tx(key, "HEURISTIC_COMMIT")
    finally:
        stranger.close()
    assert refused.code == 500
    assert refused.body == b"HEURISTIC_COMMIT is accepted only from the broker's own host."
    operator = Client(broker, "127.0.0.1", "operator")
    try:
        assert operator.tx(key, "HEURISTIC_COMMIT").code == 200
        assert operator.tx(key, "FORGET").code == 200
    finally:
        operator.close()
    assert b"finished by the operator" in stored(broker)


def post_reload(broker: BrokerProcess, source: str, token: str = DASHBOARD_TOKEN) -> int:
    connection = http.client.HTTPConnection(
        "127.0.0.1", dashboard_port(broker), timeout=10, source_address=(source, 0)
    )
    headers = {"X-MetaQ-Admin": "1", "Authorization": f"Bearer {token}"}
    try:
        connection.request("POST", "/reload-config", headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_dashboard_actions_are_refused_from_another_host_and_taken_from_the_operator(broker):
    assert post_reload(broker, OTHER_HOST) == 403
    assert post_reload(broker, "127.0.0.1", token="not the operator token") == 401
    assert post_reload(broker, "127.0.0.1") == 200
