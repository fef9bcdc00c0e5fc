"""A gregor slave takes ``sync`` only from its configured samsa master (``meta.sync.peers``).

Goal: a client that is not the master cannot write into a gregor slave: its ``sync`` gets
403 naming the master, nothing is stored (the slave's partition end and segment files stay
as they were), and the master's next puts still succeed with no divergence; with
``syncSecret`` set, a master that proves another secret, or none, is refused.
Method: real ``--gregor`` and ``--samsa`` broker processes without ZooKeeper; the stranger
is a raw socket bound to 127.0.0.2 (another loopback address), sending the bytes a Java
samsa master sends.
"""

from __future__ import annotations

import socket

import pytest

from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Put, Result, Sync
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.test_samsa_master import start_master, stats_sync, wait_until

STRANGER = "127.0.0.2"


def start_gregor(directory, master_port: int, secret: str | None = None) -> BrokerProcess:
    directory.mkdir(parents=True, exist_ok=True)
    properties = directory / "gregor_slave.properties"
    text = f"master=127.0.0.1:{master_port}\n"
    properties.write_text(text if secret is None else text + f"syncSecret={secret}\n")
    slave = BrokerProcess(directory, topics={"test": {}})
    slave.arguments = ["--gregor", str(properties)]
    return slave.start()


def slave_end(slave: BrokerProcess) -> tuple[int, int]:
    """test-0's end in the slave's ``stats sync``, and the bytes of its segment files."""
    lines = [line for line in stats_sync(slave) if line.startswith("partition test-0 ")]
    end = int(lines[0].split()[2]) if lines else 0
    files = sum(path.stat().st_size for path in (slave.data_path / "test-0").glob("*.meta"))
    return end, files


def put(master: BrokerProcess, payloads: list[bytes]) -> list[Result]:
    with master.connect(timeout_s=30) as connection:
        return [connection.request(Put("test", 0, p, 0, i + 1, -1)) for i, p in enumerate(payloads)]


def stranger_syncs(slave: BrokerProcess, count: int) -> list[Result]:
    """``count`` syncs to test-0, in one write, from 127.0.0.2; their replies."""
    frames = b"".join(
        encode(
            Sync("test", 0, b"injected-%d" % i, 0, 4242 + i, i + 1, checksum(b"injected-%d" % i))
        )
        for i in range(count)
    )
    decoder = Decoder()
    replies: list = []
    with socket.create_connection(
        ("127.0.0.1", slave.port), timeout=10, source_address=(STRANGER, 0)
    ) as raw:
        raw.sendall(frames)
        for _ in range(10_000):
            frame = decoder.next_command()
            if frame is NEED_DATA:
                chunk = raw.recv(65536)
                assert chunk, f"the slave closed the connection after {len(replies)} replies"
                decoder.receive_data(chunk)
                continue
            replies.append(frame)
            if len(replies) == count:
                return replies
    raise AssertionError("no end of the replies")


def test_a_sync_from_another_address_is_refused_and_nothing_is_stored(tmp_path):
    master_port = free_port()
    slave = start_gregor(tmp_path / "slave", master_port)
    master = start_master(tmp_path / "master", slave.port, port=master_port, topics={"test": {}})
    try:
        wait_until(lambda: "connected true" in stats_sync(master), "the link")
        assert [r.code for r in put(master, [b"one", b"two"])] == [200, 200]
        before = slave_end(slave)
        assert before[0] > 0
        for count in (1, 3):  # one sync alone, and a run of syncs in one read
            replies = stranger_syncs(slave, count)
            assert [r.code for r in replies] == [403] * count, replies
            expected = f"sync is accepted only from the master 127.0.0.1:{master_port}"
            assert all(r.body.decode().startswith(expected) for r in replies), replies
            assert STRANGER in replies[0].body.decode()
        assert slave_end(slave) == before
        assert [r.code for r in put(master, [b"three", b"four"])] == [200, 200]
        assert "partition test-0 ok" in " ".join(stats_sync(master))
        assert "diverged" not in master.log()
        assert slave_end(slave)[0] > before[0]
        assert f"refused sync from {STRANGER}" in slave.log()
        slave.stop()  # the master compares the ends again when the slave is back
        wait_until(lambda: "connected false" in stats_sync(master), "the link down")
        slave.start()
        wait_until(lambda: "connected true" in stats_sync(master), "the link up again")
        wait_until(lambda: "partition test-0 ok" in " ".join(stats_sync(master)), "the compare")
        assert [(r.code, r.body) for r in put(master, [b"five"])][0][0] == 200, stats_sync(master)
        assert "diverged" not in master.log()
    finally:
        master.stop()
        slave.stop()


def test_with_a_secret_a_master_that_proves_another_or_none_is_refused(tmp_path):
    master_port = free_port()
    slave = start_gregor(tmp_path / "slave", master_port, secret="right horse")
    try:
        for wrong in ("syncSecret=wrong horse\n", ""):
            master = start_master(
                tmp_path / "wrong", slave.port, more_properties=wrong, port=master_port,
                topics={"test": {}},
            )  # fmt: skip
            try:
                wait_until(lambda m=master: "connected true" in stats_sync(m), "the link")
                assert [r.code for r in put(master, [b"refused"])] == [500]
            finally:
                master.stop()
            assert slave_end(slave) == (0, 0)
        assert "refused the sync-hello from 127.0.0.1" in slave.log()
        master = start_master(
            tmp_path / "right", slave.port, more_properties="syncSecret=right horse\n",
            port=master_port, topics={"test": {}},
        )  # fmt: skip
        try:
            wait_until(lambda: "connected true" in stats_sync(master), "the link")
            assert [r.code for r in put(master, [b"taken"])] == [200]
            assert slave_end(slave)[0] > 0
        finally:
            master.stop()
    finally:
        slave.stop()


def test_a_master_name_that_does_not_resolve_stops_the_start_naming_it(tmp_path):
    properties = tmp_path / "gregor_slave.properties"
    properties.write_text("master=no-such-master.invalid:8123\n")
    slave = BrokerProcess(tmp_path, topics={"test": {}})
    slave.arguments = ["--gregor", str(properties)]
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        slave.start()
    assert "the master no-such-master.invalid:8123 of gregor_slave.properties does not " in (
        slave.log()
    )
