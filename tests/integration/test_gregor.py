"""A gregor (synchronous-replication) slave as a real process, driven over raw sockets.

Goal: a Java samsa master can use a metaq-py gregor slave (sync spec §1.3, §1.5, §1.11).
Method: one broker process started with ``--gregor conf/gregor_slave.properties`` and a
ZooKeeper that does not exist (``zk.zkEnable=true`` towards a closed port: the slave needs
none); each test sends the bytes a Java samsa master sends, on a raw socket or the blocking
client's connection, and checks the reply bytes and what the slave stored.
"""

from __future__ import annotations

import signal
import socket
import time

import pytest

from meta.client.net.connection import BrokerConnection
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Data, Get, Put, Result, Stats, Sync
from meta.protocol.message import checksum, iter_messages
from meta.sync.gregor import STATUS_TEST_TOPIC
from tests.integration.broker_process import REPO, BrokerProcess

GOLDEN_SYNC = b"sync test 0 5 0 2061191510652616704 907060870 7\r\nhello"
GOLDEN_REPLY = b"result 200 23 7\r\n2061191510652616704 0 0"


@pytest.fixture(scope="module")
def gregor(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("gregor"),
        topics={"test": {}, "ordered": {"numPartitions": 2}, "once": {}},
        zk={"zk.zkEnable": "true", "zk.zkConnect": "127.0.0.1:1"},
    )
    broker.arguments = ["--gregor", str(REPO / "conf" / "gregor_slave.properties")]
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def connection(gregor):
    with gregor.connect() as opened:
        yield opened


def raw_exchange(broker: BrokerProcess, request: bytes, length: int) -> bytes:
    """Send ``request`` on a new socket; read ``length`` bytes back (bounded wait)."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
        raw.sendall(request)
        received = b""
        while len(received) < length:
            chunk = raw.recv(length - len(received))
            if not chunk:
                break
            received += chunk
        return received


def records(connection: BrokerConnection, topic: str, partition: int = 0) -> list:
    reply = connection.request(Get(topic, "g", partition, 0, 1 << 20, connection.next_opaque()))
    assert isinstance(reply, Data), reply
    return list(iter_messages(reply.data))


def test_the_specs_sync_bytes_get_the_specs_reply_bytes(gregor):
    """The first test of the module: ``test-0`` is empty, so the slave's offset is 0."""
    assert raw_exchange(gregor, GOLDEN_SYNC, len(GOLDEN_REPLY)) == GOLDEN_REPLY
    with gregor.connect() as connection:
        (record,) = records(connection, "test")
    assert (record.offset, record.msg_id, record.flag, record.payload) == (
        0,
        2061191510652616704,
        0,
        b"hello",
    )


def test_the_7_token_form_stores_the_masters_id_and_flag_unchecked(connection):
    """Masters before 1.4.4 send no checksum: nothing is checked, the id and flag are kept."""
    connection.send_bytes(b"sync once 0 3 5 -4611686018427387904 9\r\nabc")
    reply = connection.receive()
    assert (reply.code, reply.opaque) == (200, 9)
    assert reply.body == b"-4611686018427387904 0 0"
    (record,) = records(connection, "once")
    assert (record.msg_id, record.flag, record.payload) == (-4611686018427387904, 5, b"abc")


def test_a_wrong_checksum_gets_500_and_minus_1_is_not_checked(connection):
    bad = connection.request(Sync("test", 0, b"data", 0, 11, connection.next_opaque(), 12345))
    assert bad.code == 500
    assert bad.body.endswith(
        b"Checksum failure,message may be corrupted when transfering on networking."
    )
    unchecked = connection.request(Sync("test", 0, b"data", 0, 12, connection.next_opaque(), -1))
    right = connection.request(
        Sync("test", 0, b"data", 0, 13, connection.next_opaque(), checksum(b"data"))
    )
    assert (unchecked.code, right.code) == (200, 200)


def test_a_topic_the_slave_does_not_accept_gets_500(connection):
    reply = connection.request(Sync("nowhere", 0, b"x", 0, 1, connection.next_opaque(), -1))
    assert reply.code == 500
    assert b"nowhere" in reply.body


def test_a_plain_put_gets_403_naming_the_gregor_role(connection):
    for put in (
        Put("test", 0, b"no", 0, connection.next_opaque()),
        Put("test", 0, b"no", 0, connection.next_opaque(), tx_key="TX:s:1"),
    ):
        reply = connection.request(put)
        assert reply.code == 403
        assert b"gregor (synchronous replication) slave of broker 0" in reply.body


def test_transaction_commands_get_javas_unsupported_texts(connection):
    opaque = connection.next_opaque()
    connection.send_bytes(b"transaction TX:s:1 s BEGIN %d\r\n" % opaque)
    reply = connection.receive()
    assert (reply.code, reply.body) == (500, b"Unsupported beginTransaction")


def test_syncs_of_one_partition_keep_their_order_across_reconnects(gregor):
    """Goal: order per partition, not per connection. Method: three connections in turn
    (each closed before the next opens) pipeline 300 syncs each over both partitions; the
    slave's records are in sending order with consecutive offsets."""
    sent: dict[int, list[int]] = {0: [], 1: []}
    msg_id = 10_000
    for _turn in range(3):
        with gregor.connect() as connection:
            batch = []
            for index in range(300):
                msg_id += 1
                partition = index % 2
                sent[partition].append(msg_id)
                payload = b"m%d" % msg_id
                batch.append(Sync("ordered", partition, payload, 0, msg_id, index, -1))
            connection.send_bytes(b"".join(encode(command) for command in batch))
            replies = [connection.receive() for _ in batch]
        assert {reply.code for reply in replies} == {200}
    with gregor.connect() as connection:
        for partition in (0, 1):
            stored = records(connection, "ordered", partition)
            assert [record.msg_id for record in stored] == sent[partition]


def test_stats_sync_names_the_role_the_master_and_every_partition(gregor):
    before_ms = int(time.time() * 1000)
    with socket.create_connection(("127.0.0.1", gregor.port), timeout=10) as raw:
        raw.sendall(encode(Sync("test", 0, b"s", 0, 99, 1, -1)) + encode(Stats("sync", 2)))
        replies = {frame.opaque: frame for frame in read_replies(raw, 2)}  # any order
        reply = replies[2]
        host, port = raw.getsockname()[:2]
    assert isinstance(reply, Result)
    assert reply.code == 200
    lines = reply.body.decode().splitlines()
    assert lines[:2] == ["role gregor", f"master {host}:{port}"]
    partitions = [line.split() for line in lines[2:]]
    assert {fields[0] for fields in partitions} == {"partition"}
    names = [fields[1] for fields in partitions]
    assert names == sorted(names, key=lambda name: (name.rsplit("-", 1)[0], name))
    assert f"{STATUS_TEST_TOPIC}-0" in names
    by_name = {fields[1]: fields for fields in partitions}
    assert by_name[f"{STATUS_TEST_TOPIC}-0"][2:] == ["0", "0"]
    end, last_ms = int(by_name["test-0"][2]), int(by_name["test-0"][3])
    assert end > 0
    assert before_ms - 1000 <= last_ms <= int(time.time() * 1000) + 1000
    deadline = time.monotonic() + 10
    while True:  # the slave sees the close of the master's connection soon, not at once
        with gregor.connect() as connection:
            later = connection.request(Stats("sync", connection.next_opaque()))
        if later.body.decode().splitlines()[1] == "master -" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert later.body.decode().splitlines()[1] == "master -"


def read_replies(raw: socket.socket, count: int) -> list:
    decoder = Decoder()
    replies: list = []
    while len(replies) < count:
        frame = decoder.next_command()
        if frame is NEED_DATA:
            data = raw.recv(65536)
            assert data, "the slave closed the connection"
            decoder.receive_data(data)
        else:
            replies.append(frame)
    return replies


def test_the_slave_logs_that_it_runs_without_zookeeper(gregor):
    assert "gregor slave (no ZooKeeper registration)" in gregor.log()
    assert "zookeeper disabled" in gregor.log()


JAVA_PROBE = b"sync _metaq_slave_status_test 0 4 0 %d 1484750348 %d\r\ntest"


def test_a_java_masters_status_probe_is_stored_also_after_a_reload(gregor):
    """Goal: a samsa master's probe (Java's bytes) reaches the status-test topic, which a
    config reload keeps (it is not in server.ini). Method: probe, SIGHUP, wait for the
    reload's outcome in the log (bounded), probe again."""
    expected = b"result 200 7 31\r\n501 0 0"
    assert raw_exchange(gregor, JAVA_PROBE % (501, 31), len(expected)) == expected
    since = len(gregor.log())
    gregor.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while "config reload done" not in gregor.log()[since:]:
        assert "config reload failed" not in gregor.log()[since:]
        assert time.monotonic() < deadline, gregor.log()[since:]
        time.sleep(0.05)
    expected = b"result 200 8 32\r\n502 0 24"
    assert raw_exchange(gregor, JAVA_PROBE % (502, 32), len(expected)) == expected
