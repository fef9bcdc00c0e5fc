"""``tools/metaServer.sh promote`` of a gregor slave, with real processes and ZooKeeper.

Goal: after its samsa master is lost, a gregor slave becomes the master of its brokerId with
the consumer offsets recovered against its own data (sync spec S5). Method: the script
starts a gregor slave in a private run dir; a raw socket plays its samsa master and syncs
records with the master's (positive) ids; a consumer group's offset is committed in
ZooKeeper as the old master wrote it (the same id, at another offset); then ``promote``
(or ``promote --new-slave``), and the test checks the offsets node, the registration and
a put to the promoted broker.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from meta.client.net.connection import BrokerConnection
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Put, Stats, Sync
from tests.integration.broker_process import free_port, server_ini
from tests.integration.script_run import ScriptRun
from tests.integration.test_samsa_gregor import records, start_gregor

IDS = list(range(1_000_001, 1_000_011))


class GregorRun(ScriptRun):
    def __init__(self, directory: Path, zookeeper, zk_root: str) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.conf.write_text(
            server_ini(
                self.port,
                directory / "data",
                zk_connect=zookeeper.connect_string,
                zk={"zk.zkRoot": zk_root},
            )
        )

    def command_line(self) -> list[str]:
        return Path(f"/proc/{self.pid()}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


@pytest.fixture
def gregor(tmp_path, zookeeper, zk_root):
    run = GregorRun(tmp_path, zookeeper, zk_root)
    started = run.run("start", "gregor")
    assert started.returncode == 0, started.stdout + started.stderr
    yield run
    run.stop_broker()


def sync_records(port: int) -> dict[int, int]:
    """Sync ``IDS`` to partition test-0 as a samsa master; return id -> end offset."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            b"".join(
                encode(Sync("test", 0, b"body-%d" % msg_id, 0, msg_id, index, -1))
                for index, msg_id in enumerate(IDS)
            )
        )
        decoder, replies = Decoder(), []
        while len(replies) < len(IDS):
            frame = decoder.next_command()
            if frame is NEED_DATA:
                data = raw.recv(65536)
                assert data
                decoder.receive_data(data)
            else:
                replies.append(frame)
    assert {reply.code for reply in replies} == {200}
    offsets = {int(reply.body.split()[0]): int(reply.body.split()[2]) for reply in replies}
    record_bytes = 20 + len(b"body-%d" % IDS[0])
    return {msg_id: offset + record_bytes for msg_id, offset in offsets.items()}


def commit(admin, zk_root: str, group: str, text: str) -> str:
    path = f"{zk_root}/consumers/{group}/offsets/test/0-0"
    admin.create(path, text.encode(), makepath=True)
    return path


def test_promote_recovers_the_offsets_and_starts_a_plain_master(gregor, admin, zk_root):
    ends = sync_records(gregor.port)
    consumed = commit(admin, zk_root, "readers", f"{IDS[4]}-999999")
    promoted = gregor.run("promote")

    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "stopping the gregor slave (pid " in promoted.stdout
    assert "promoted: broker 0 serving" in promoted.stdout
    assert admin.get(consumed)[0].decode() == f"{IDS[4]}-{ends[IDS[4]]}"
    assert admin.exists(f"{zk_root}/brokers/ids/0/master")
    assert "--gregor" not in gregor.command_line()
    with BrokerConnection("127.0.0.1", gregor.port) as connection:
        reply = connection.request(Put("test", 0, b"after", 0, connection.next_opaque()))
    assert reply.code == 200
    assert int(reply.body.split()[2]) == ends[IDS[-1]]


def test_promote_with_a_new_slave_starts_a_samsa_master_of_it(gregor, admin, zk_root, tmp_path):
    """Goal: ``promote --new-slave`` starts a samsa master that replicates to a gregor slave
    at that address. Method: promote with a free port as the new slave; a put is refused
    while nothing listens there; then a gregor slave starts empty at that address, and the
    first put answered 200 must be on the new slave (with the records the promoted broker
    already held, caught up), at the master's offset, and ``stats sync`` shows the link."""
    sync_records(gregor.port)
    new_slave_port = free_port()
    samsa = tmp_path / "samsa.properties"
    samsa.write_text("slave=10.0.0.1:8124\nsendToSlaveTimeoutInMills=2000\nrecoverOffset=true\n")

    promoted = gregor.run(
        "promote", "--new-slave", f"127.0.0.1:{new_slave_port}", META_SAMSA_CONF=str(samsa)
    )

    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    written = gregor.run_dir / "samsa_master.promoted.properties"
    assert gregor.command_line()[-2:] == ["--samsa", str(written)]
    lines = written.read_text().splitlines()
    assert lines[1:] == [
        "sendToSlaveTimeoutInMills=2000",
        f"slave=127.0.0.1:{new_slave_port}",
        "recoverOffset=false",
    ]
    with BrokerConnection("127.0.0.1", gregor.port) as connection:
        refused = connection.request(Put("test", 0, b"alone", 0, connection.next_opaque()))
    assert refused.code == 500  # no slave yet: nothing is acknowledged from one copy
    new_slave = start_gregor(tmp_path / "new-slave", new_slave_port, 0)
    try:
        with BrokerConnection("127.0.0.1", gregor.port, timeout_s=30) as connection:
            deadline = time.monotonic() + 30
            while (reply := put_after(connection)).code != 200:
                assert time.monotonic() < deadline, reply
            stats = connection.request(Stats("sync", connection.next_opaque()))
        msg_id, _partition, offset = (int(token) for token in reply.body.split())
        on_new_slave = records(new_slave)
        assert on_new_slave[msg_id] == (offset, 0, b"after")
        assert set(on_new_slave) == {*IDS, msg_id}
        lines = stats.body.decode().splitlines()
        assert lines[:3] == ["role samsa", f"slave 127.0.0.1:{new_slave_port}", "connected true"]
        end = offset + 20 + len(b"after")
        assert f"partition test-0 ok {end} {end}" in lines
    finally:
        new_slave.stop()


def put_after(connection: BrokerConnection):
    return connection.request(Put("test", 0, b"after", 0, connection.next_opaque()))


def test_promote_refuses_a_new_slave_that_is_not_host_port(gregor):
    refused = gregor.run("promote", "--new-slave", "nowhere")
    assert refused.returncode == 1
    assert "--new-slave nowhere is not HOST:PORT" in refused.stderr
    assert "--gregor" in gregor.command_line()
