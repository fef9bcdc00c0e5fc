"""A real samsa master process (``--samsa``) against a raw-socket fake gregor slave.

Goal: every write path of the master (plain puts, pipelined runs, HTTP puts) is answered 200
only after the slave answered the record's ``sync``; the ``sync`` bytes are Java's 8-token
form; every failure of the slave (down, silent, refusing) gives the put a 500 with Java's
text. Method: ``tests.integration.fake_gregor.FakeGregorSlave`` records what it receives
byte for byte and answers like a gregor slave; the master is a real broker process without
ZooKeeper (the ZooKeeper side is ``test_samsa_failover``).
"""

from __future__ import annotations

import http.client
import time

import pytest

from meta.protocol.commands import Get, Put, Result, Stats
from meta.protocol.encoding import encode
from meta.protocol.message import iter_messages
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.fake_gregor import FakeGregorSlave
from tests.integration.test_dashboard import dashboard_port
from tests.integration.test_http import http_port

TIMEOUT_MS = 1000
MARGIN_S = 1.5


def start_master(
    directory, slave_port: int, http: bool = False, more_properties: str = "", **ini
) -> BrokerProcess:
    """A samsa master replicating to 127.0.0.1:``slave_port``."""
    directory.mkdir(parents=True, exist_ok=True)
    properties = directory / "samsa_master.properties"
    properties.write_text(
        f"slave=127.0.0.1:{slave_port}\nsendToSlaveTimeoutInMills={TIMEOUT_MS}\n"
        "slaveContinuousFailureThreshold=5\ncheckSlaveIntervalInMills=50\n" + more_properties
    )
    broker = BrokerProcess(directory, **ini)
    broker.arguments = ["--samsa", str(properties)]
    if http:
        (directory / "jettyBroker.properties").write_text("serverPort=0\n")
        broker.arguments += ["--http", str(directory / "jettyBroker.properties")]
    return broker.start()


def put_frame(topic: str, body: bytes, opaque: int) -> bytes:
    return encode(Put(topic, 0, body, 0, opaque, -1))


def stats_sync(broker: BrokerProcess) -> list[str]:
    with broker.connect() as connection:
        reply = connection.request(Stats("sync", 1))
    assert isinstance(reply, Result) and reply.code == 200, reply
    return reply.body.decode().splitlines()


def wait_until(condition, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached within {timeout_s} s")


@pytest.fixture
def slave():
    fake = FakeGregorSlave(free_port()).start()
    yield fake
    fake.stop()


@pytest.fixture
def master(tmp_path, slave):
    broker = start_master(tmp_path / "master", slave.port, topics={"test": {}, "other": {}})
    slave.wait_for(lambda fake: fake.stats_items == ["sync", "offsets"], what="detection")
    yield broker
    broker.stop()


def test_a_put_goes_to_the_slave_as_javas_sync_bytes_before_its_200(master, slave):
    with master.connect() as connection:
        reply = connection.request(Put("test", 0, b"hello", 0, 7, 907060870))
    assert reply.code == 200, reply
    msg_id, partition, offset = reply.body.split()
    assert (partition, offset) == (b"0", b"0")
    assert bytes(slave.received) == (
        b"stats sync 1\r\nstats offsets 2\r\nsync test 0 5 0 %s 907060870 3\r\nhello" % msg_id
    )


def test_a_put_without_checksum_is_forwarded_with_its_record_checksum(master, slave):
    with master.connect() as connection:
        reply = connection.request(Put("other", -1, b"hello", 1, 9))
    assert reply.code == 200
    (sync,) = slave.syncs
    assert (sync.topic, sync.partition, sync.flag, sync.checksum) == ("other", 0, 1, 907060870)
    assert sync.msg_id == int(reply.body.split()[0])


def test_pipelined_puts_are_stored_in_the_same_order_on_both_sides(master, slave):
    """Goal: a run of puts (the ``put_run`` path) keeps one order per partition on both
    copies. Method: 300 puts in one write over two partitions of two topics; every reply is
    200 at the offset the slave answered, and the slave got the ids in the master's order."""
    count = 300
    with master.connect() as connection:
        frames = b"".join(
            put_frame(("test", "other")[i % 2], b"m%04d" % i, i + 1) for i in range(count)
        )
        connection.send_bytes(frames)
        replies = [connection.receive() for _ in range(count)]
        assert all(reply.code == 200 for reply in replies), replies[:3]
        reply = connection.request(Get("test", "g", 0, 0, 1 << 20, 10_000))
    by_opaque = {reply.opaque: reply.body.split() for reply in replies}
    master_records = list(iter_messages(reply.data))
    assert [r.payload for r in master_records] == [b"m%04d" % i for i in range(0, count, 2)]
    slave_test = [s for s in slave.syncs if s.topic == "test"]
    assert [s.msg_id for s in slave_test] == [r.msg_id for r in master_records]
    assert [s.data for s in slave_test] == [r.payload for r in master_records]
    assert all(int(by_opaque[i + 1][2]) >= 0 for i in range(count))
    assert slave.ends[("test", 0)] == master_records[-1].offset + master_records[-1].size


def test_a_slave_that_refuses_makes_the_put_fail_with_the_slave_text(master, slave):
    slave.code = 500
    with master.connect() as connection:
        reply = connection.request(Put("test", 0, b"x", 0, 3))
    assert reply.code == 500
    assert reply.body == (
        b"Put message to [slave 'meta://127.0.0.1:%d'] [partition 'test-0'] failed; stored on "
        b"the master (consumers read it), maybe not on the slave" % slave.port
    )


def test_a_silent_slave_fails_the_put_after_the_timeout(master, slave):
    slave.hold()
    with master.connect() as connection:
        started = time.monotonic()
        reply = connection.request(Put("test", 0, b"x", 0, 3))
        elapsed = time.monotonic() - started
    assert reply.code == 500 and b"[slave '" in reply.body
    assert TIMEOUT_MS / 1000 - 0.05 <= elapsed <= TIMEOUT_MS / 1000 + MARGIN_S


def test_a_put_answered_500_for_a_silent_slave_is_stored_on_the_master(master, slave):
    """Goal: the slave's 500 is in doubt, not "not stored", and says so (docs/durability.md).
    Method: a slave that never answers; the put gets the slave's 500 after the timeout, and
    a consumer of the master reads the message all the same."""
    slave.hold()
    with master.connect() as connection:
        reply = connection.request(Put("test", 0, b"in doubt", 0, 3))
        assert reply.code == 500 and b"stored on the master" in reply.body, reply
        data = connection.request(Get("test", "g", 0, 0, 1 << 20, 4))
    assert [record.payload for record in iter_messages(data.data)] == [b"in doubt"]


def test_after_the_masters_fsync_failed_later_puts_reach_neither_copy(tmp_path, slave):
    """Goal: the master's 500 is in doubt only for the put whose write or fsync failed (its
    sync went out first); once the master's partition stopped, later puts are refused
    without a sync, so their 500 means not stored on either copy. Method: a master whose
    segment fsyncs fail once a trigger file exists (``fault_broker``)."""
    trigger = tmp_path / "disk-fails"
    directory = tmp_path / "master"
    directory.mkdir()
    properties = directory / "samsa_master.properties"
    properties.write_text(f"slave=127.0.0.1:{slave.port}\nsendToSlaveTimeoutInMills={TIMEOUT_MS}\n")
    broker = BrokerProcess(directory)
    broker.module = "tests.integration.fault_broker"
    broker.arguments = ["--fail-when", str(trigger), "--samsa", str(properties)]
    broker.start()
    try:
        slave.wait_for(lambda fake: fake.stats_items == ["sync", "offsets"], what="detection")
        with broker.connect() as connection:
            assert connection.request(Put("test", 0, b"stored", 0, 1)).code == 200
            trigger.touch()
            failing = connection.request(Put("test", 0, b"in doubt", 0, 2))
            later = [connection.request(Put("test", 0, b"later", 0, 3 + n)) for n in range(3)]
    finally:
        broker.stop()
    assert failing.code == 500 and b"the slave may hold it" in failing.body, failing
    assert {reply.code for reply in later} == {500}
    assert all(b"partition test-0 failed" in reply.body for reply in later), later[0]
    assert [sync.data for sync in slave.syncs if sync.topic == "test"] == [b"stored", b"in doubt"]


def test_puts_are_refused_at_once_while_the_slave_is_down(tmp_path):
    broker = start_master(tmp_path / "master", free_port())
    try:
        with broker.connect() as connection:
            reply = connection.request(Put("test", 0, b"x", 0, 3))
            assert (reply.code, reply.body) == (500, b"Slave is disconnected ")
            reply = connection.request(Get("test", "g", 0, 0, 1 << 20, 4))
            assert reply.code == 404  # nothing was written
        lines = stats_sync(broker)
        assert lines[:3] == [
            "role samsa",
            f"slave 127.0.0.1:{broker_slave_port(broker)}",
            "connected false",
        ]
    finally:
        broker.stop()


def broker_slave_port(broker: BrokerProcess) -> int:
    text = (broker.directory / "samsa_master.properties").read_text()
    return int(text.split("slave=127.0.0.1:")[1].split()[0])


def test_an_http_put_is_replicated_too(tmp_path, slave):
    broker = start_master(tmp_path / "master", slave.port, http=True)
    try:
        slave.wait_for(lambda fake: "offsets" in fake.stats_items, what="detection")
        connection = http.client.HTTPConnection("127.0.0.1", http_port(broker), timeout=10)
        connection.request("POST", "/put/0?topic=test&partition=0&flag=0&length=5", b"hello")
        response = connection.getresponse()
        assert response.status == 200, response.read()
        connection.close()
        (sync,) = slave.syncs
        assert sync.data == b"hello"
        slave.hold()
        connection = http.client.HTTPConnection("127.0.0.1", http_port(broker), timeout=10)
        connection.request("POST", "/put/0?topic=test&partition=0&flag=0&length=5", b"again")
        response = connection.getresponse()
        assert response.status != 200
        connection.close()
    finally:
        broker.stop()


def test_stats_sync_reports_the_link_and_every_partition(master, slave):
    with master.connect() as connection:
        assert connection.request(Put("test", 0, b"hello", 0, 3)).code == 200
        assert connection.request(Put("other", 0, b"hi", 0, 4)).code == 200
    assert stats_sync(master) == [
        "role samsa",
        f"slave 127.0.0.1:{slave.port}",
        "connected true",
        "consecutive_failures 0",
        "probing false",
        "advertised true",
        "partition other-0 ok 22 22",
        "partition test-0 ok 25 25",
    ]


def test_the_dashboard_metrics_show_the_replication_state(master, slave):
    with master.connect() as connection:
        assert connection.request(Put("test", 0, b"hello", 0, 3)).code == 200
    connection = http.client.HTTPConnection("127.0.0.1", dashboard_port(master), timeout=10)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    assert 'role="sync_master"' in text
    assert "metaq_sync_slave_connected 1.0" in text
    assert "metaq_sync_published 1.0" in text
    assert 'metaq_sync_partition_state{partition="0",state="ok",topic="test"} 1.0' in text
    assert "metaq_sync_latency_seconds_count 1.0" in text


def test_a_pipelined_run_refused_by_the_slave_is_answered_put_by_put(master, slave):
    """Goal: the batch path of a run answers each put, with the slave's verdict on it.
    Method: the slave refuses every sync; 50 puts in one write all get the slave text."""
    with master.connect() as connection:
        assert connection.request(Put("test", 0, b"first", 0, 1)).code == 200
        slave.code = 500
        connection.send_bytes(b"".join(put_frame("test", b"r%d" % i, i + 2) for i in range(50)))
        replies = [connection.receive() for _ in range(50)]
    assert sorted(reply.opaque for reply in replies) == list(range(2, 52))
    assert {reply.code for reply in replies} == {500}
    assert {bytes(reply.body[:22]) for reply in replies} == {b"Put message to [slave "}
    assert sum(s.topic == "test" for s in slave.syncs) == 51  # each put went to the slave once


def test_puts_beyond_max_syncs_in_flight_get_500_at_once(tmp_path, slave):
    """Goal: the link holds at most ``maxSyncsInFlight`` unanswered syncs. Method: a slave
    that stops answering and a bound of 3; of 8 puts sent one by one on 8 connections (so
    none is part of a run), the first 3 wait for the slave (then time out), the other 5 are
    refused at once with the bound's text."""
    broker = start_master(tmp_path / "master", slave.port, more_properties="maxSyncsInFlight=3\n")
    try:
        slave.wait_for(lambda fake: fake.stats_items == ["sync", "offsets"], what="detection")
        slave.hold()
        connections = [broker.connect() for _ in range(8)]
        for opaque, connection in enumerate(connections):
            connection.send_bytes(put_frame("test", b"x", opaque))
            if opaque < 3:
                slave.wait_for(lambda fake, n=opaque: len(fake.syncs) > n, what="a sync")
        refused = [connection.receive() for connection in connections[3:]]
        timed_out = [connection.receive() for connection in connections[:3]]
        for connection in connections:
            connection.close()
    finally:
        broker.stop()
    text = b"Too many puts in flight to slave 'meta://127.0.0.1:%d' (maxSyncsInFlight=3)"
    assert {(reply.code, bytes(reply.body)) for reply in refused} == {(500, text % slave.port)}
    assert {reply.code for reply in timed_out} == {500}
    assert all(b"[slave '" in reply.body for reply in timed_out)
    assert len(slave.syncs) == 3
