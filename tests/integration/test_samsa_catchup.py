"""A samsa master's offsets check, catch-up and failure threshold, against a fake slave.

Goal (sync spec §1.7, §1.11): a metaq-py slave that is behind is caught up byte for byte
(original id, flag, payload and checksum) before the next put to the partition is
acknowledged; a slave whose end is not one of the master's record boundaries is reported
``diverged`` and puts to the partition are refused; a Java slave (no ``stats sync``) is not
caught up, and a reply at another offset is reported but still answered 200; failed replies
up to the threshold start the status-topic probe. Method: a real master process and
``FakeGregorSlave`` instances on one port, replaced to play a slave that comes back.
"""

from __future__ import annotations

from meta.protocol.commands import Get, Put
from meta.protocol.message import checksum, iter_messages
from tests.integration.broker_process import free_port
from tests.integration.fake_gregor import FakeGregorSlave
from tests.integration.test_samsa_master import start_master, stats_sync, wait_until


def put_all(master, bodies: list[bytes], topic: str = "test") -> list:
    with master.connect() as connection:
        return [
            connection.request(Put(topic, 0, body, index % 3, index + 1))
            for index, body in enumerate(bodies)
        ]


def master_records(master, topic: str = "test") -> list:
    with master.connect() as connection:
        reply = connection.request(Get(topic, "g", 0, 0, 1 << 20, 1))
    return list(iter_messages(reply.data))


def test_a_slave_that_comes_back_empty_is_caught_up_before_the_next_put(tmp_path):
    slave = FakeGregorSlave(free_port()).start()
    master = start_master(tmp_path / "master", slave.port)
    try:
        slave.wait_for(lambda fake: "offsets" in fake.stats_items, what="detection")
        bodies = [b"record %d" % i * (i + 1) for i in range(10)]
        assert all(reply.code == 200 for reply in put_all(master, bodies))
        slave.stop()
        slave = FakeGregorSlave(slave.port).start()  # a new, empty slave
        wait_until(lambda: len(slave.syncs) >= 10, "the replay")
        (reply,) = put_all(master, [b"after the catch-up"])
        assert reply.code == 200
        records = master_records(master)
        replayed = [(s.msg_id, s.flag, s.data, s.checksum) for s in slave.syncs]
        assert replayed == [
            (r.msg_id, r.flag, r.payload, checksum(r.payload)) for r in records
        ]  # byte-identical, the new put last
        assert slave.ends[("test", 0)] == records[-1].offset + records[-1].size
        assert f"partition test-0 ok {slave.ends[('test', 0)]} {slave.ends[('test', 0)]}" in (
            stats_sync(master)
        )
    finally:
        master.stop()
        slave.stop()


def test_a_slave_off_the_masters_record_boundaries_is_diverged_and_refused(tmp_path):
    slave = FakeGregorSlave(free_port()).start()
    master = start_master(tmp_path / "master", slave.port)
    try:
        slave.wait_for(lambda fake: "offsets" in fake.stats_items, what="detection")
        assert all(reply.code == 200 for reply in put_all(master, [b"hello", b"world"]))
        slave.stop()
        slave = FakeGregorSlave(slave.port)
        slave.ends[("test", 0)] = 7  # inside the master's first record
        slave.start()
        wait_until(lambda: "partition test-0 diverged 50 7" in stats_sync(master), "divergence")
        (reply,) = put_all(master, [b"refused"])
        assert (reply.code, reply.body) == (500, b"slave diverged at 7")
        assert "gregor slave diverged on test-0 at offset 7" in master.log()
        assert len(slave.syncs) == 0
    finally:
        master.stop()
        slave.stop()


def test_a_java_slave_is_not_caught_up_and_an_offset_mismatch_is_reported(tmp_path):
    slave = FakeGregorSlave(free_port(), metaq_py=False)
    slave.ends[("test", 0)] = 100  # the Java slave has older data of its own
    slave.start()
    master = start_master(tmp_path / "master", slave.port)
    try:
        slave.wait_for(lambda fake: fake.stats_items == ["sync"], what="detection")
        replies = put_all(master, [b"one", b"two"])
        assert [reply.code for reply in replies] == [200, 200]  # reported, not refused
        assert "partition test-0 diverged 46 -1" in stats_sync(master)
        assert master.log().count("the copies have diverged") == 1  # one ERROR
    finally:
        master.stop()
        slave.stop()


def test_failed_replies_up_to_the_threshold_start_the_probe_until_the_slave_answers(tmp_path):
    slave = FakeGregorSlave(free_port()).start()
    master = start_master(tmp_path / "master", slave.port)  # threshold 5, probe every 50 ms
    try:
        slave.wait_for(lambda fake: "offsets" in fake.stats_items, what="detection")
        slave.code = 500
        replies = put_all(master, [b"x"] * 5)
        assert all(reply.code == 500 for reply in replies)
        lines = stats_sync(master)
        assert "probing true" in lines and "advertised false" in lines
        slave.wait_for(
            lambda fake: sum(s.topic == "_metaq_slave_status_test" for s in fake.syncs) >= 2,
            what="probes",
        )
        probe = next(s for s in slave.syncs if s.topic == "_metaq_slave_status_test")
        assert (probe.partition, probe.data, probe.flag, probe.checksum) == (
            0,
            b"test",
            0,
            1484750348,
        )
        slave.code = 200
        wait_until(lambda: "advertised true" in stats_sync(master), "republishing")
        assert "probing false" in stats_sync(master)
        assert put_all(master, [b"y"])[0].code == 200
    finally:
        master.stop()
        slave.stop()


def test_puts_wait_for_a_silent_slave_and_fail_without_being_forwarded(tmp_path):
    """Goal: while the master cannot tell what a new slave is (or catch it up), puts wait
    and then fail; none is forwarded ahead of the catch-up. Method: the slave comes back
    silent; a put gets 500 after about the timeout and the slave never receives it; once
    the slave answers, the next connection catches it up and puts succeed."""
    slave = FakeGregorSlave(free_port()).start()
    master = start_master(tmp_path / "master", slave.port)
    try:
        slave.wait_for(lambda fake: "offsets" in fake.stats_items, what="detection")
        assert [reply.code for reply in put_all(master, [b"a", b"b", b"c"])] == [200] * 3
        slave.stop()
        slave = FakeGregorSlave(slave.port, held=True).start()
        slave.wait_for(lambda fake: fake.stats_items, what="a new connection")
        (reply,) = put_all(master, [b"waits"])
        assert reply.code == 500
        assert b"[slave 'meta://127.0.0.1:" in reply.body
        assert slave.syncs == []
        slave.answer()
        wait_until(lambda: len(slave.syncs) >= 3, "the catch-up of the three stored records")
        (reply,) = put_all(master, [b"after"])
        assert reply.code == 200
        assert [s.data for s in slave.syncs] == [r.payload for r in master_records(master)]
    finally:
        master.stop()
        slave.stop()
