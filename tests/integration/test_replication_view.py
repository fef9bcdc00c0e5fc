"""``meta-admin replication`` against real brokers and a real ZooKeeper.

Goal: both HA modes show up: a samsa master with its gregor slave (sync), and a plain
master with no slave (async, no rows). Method: a real gregor slave process that took one
sync; a stand-in samsa master on a raw socket that answers ``stats sync`` as a samsa master
does (the samsa role's own tests run the real one) and is registered as ``ids/7/master``;
a real plain master registered as broker 8; the command runs in-process with ``--json``.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest

from meta.admin.main import main as admin_main
from meta.protocol.codec import NEED_DATA, Decoder, encode, encode_result
from meta.protocol.commands import Stats, Sync
from tests.integration.broker_process import REPO, BrokerProcess


class FakeSamsa:
    """Answers every ``stats`` with ``body`` on 127.0.0.1; stopped by ``close``."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                decoder = Decoder()
                while True:
                    command = decoder.next_command()
                    if command is NEED_DATA:
                        data = connection.recv(65536)
                        if not data:
                            break
                        decoder.receive_data(data)
                        continue
                    assert isinstance(command, Stats)
                    connection.sendall(encode_result(200, self.body, command.opaque))

    def close(self) -> None:
        # ``close`` alone does not wake a thread blocked in ``accept``; ``shutdown`` does.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(10)


@pytest.fixture
def cluster(tmp_path, zookeeper, zk_root, admin):
    gregor = BrokerProcess(tmp_path / "gregor")
    gregor.arguments = ["--gregor", str(REPO / "conf" / "gregor_slave.properties")]
    gregor.start()
    plain = BrokerProcess(
        tmp_path / "plain",
        system={"brokerId": 8},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root},
    )
    samsa = FakeSamsa(
        f"role samsa\r\nslave 127.0.0.1:{gregor.port}\r\nconnected true\r\n"
        "consecutive_failures 0\r\nprobing false\r\nadvertised true\r\n"
        "partition test-0 ok 25 25\r\n".encode()
    )
    try:
        with socket.create_connection(("127.0.0.1", gregor.port), timeout=10) as raw:
            raw.sendall(encode(Sync("test", 0, b"hello", 0, 42, 1, -1)))
            assert raw.recv(1024).startswith(b"result 200")
        admin.create(
            f"{zk_root}/brokers/ids/7/master",
            f"meta://127.0.0.1:{samsa.port}".encode(),
            makepath=True,
        )
        plain.start()
        yield {"root": zk_root, "zookeeper": zookeeper, "gregor": gregor}
    finally:
        samsa.close()
        plain.stop()
        gregor.stop()


def test_replication_shows_the_sync_pair_and_the_async_master(cluster, capsys):
    status = admin_main(
        [
            "replication",
            "--zk-connect",
            cluster["zookeeper"].connect_string,
            "--zk-root",
            cluster["root"],
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    brokers = {broker["broker_id"]: broker for broker in json.loads(out.out)["brokers"]}
    assert brokers[8] == {"broker_id": 8, "mode": "async", "slaves": []}
    sync = brokers[7]
    assert sync["mode"] == "sync"
    assert sync["samsa"]["slave"] == f"127.0.0.1:{cluster['gregor'].port}"
    assert sync["samsa"]["partitions"] == [
        {"topic": "test", "partition": 0, "state": "ok", "master_end": 25, "slave_end": 25}
    ]
    gregor_rows = {row["topic"]: row for row in sync["gregor"]["partitions"]}
    assert gregor_rows["test"]["end"] == 25
    assert gregor_rows["test"]["last_sync_ms"] > 0
    assert "_metaq_slave_status_test" in gregor_rows


def test_replication_prints_one_row_per_replicated_partition(cluster, capsys):
    status = admin_main(
        [
            "replication",
            "7",
            "--zk-connect",
            cluster["zookeeper"].connect_string,
            "--zk-root",
            cluster["root"],
        ]
    )
    out = capsys.readouterr().out
    assert status == 0
    (header, row) = out.strip().splitlines()
    assert header.split()[:3] == ["BROKER", "MODE", "SLAVE"]
    assert row.split()[:8] == [
        "7", "sync", f"127.0.0.1:{cluster['gregor'].port}", "test", "7-0", "25", "25", "ok",
    ]  # fmt: skip
    assert "slave end 25, last sync 20" in row
