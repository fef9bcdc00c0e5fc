"""The reactor half of the slave (``Replicator._append``) and the ``--slave`` arguments."""

from __future__ import annotations

import pytest

from meta.config import SlaveConfig, ZkConfig
from meta.errors import InvalidTopicError, PartitionFailedError
from meta.protocol.message import pack_message
from meta.server.main import parse_arguments
from meta.slave.fetcher import ReplicationHalted
from meta.slave.replicator import Replicator

RECORDS = [pack_message(1, 0, b"one"), pack_message(2, 1, b"\0\0\0\0two"), pack_message(3, 4, b"")]
SIZES = [len(record) for record in RECORDS]


class FakeSegment:
    start = 0


class FakeLog:
    def __init__(self, end: int) -> None:
        self.next_offset = end
        self.accepts_appends = True
        self.staged: list[tuple[bytes, object]] = []
        self.counts: list[int] = []  # records per staged entry (the store's message counts)
        self.segments = (FakeSegment(),)
        self.segment_bytes_max = 1 << 20


class FakeBroker:
    """Stages like a partition log; ``commit_staged`` acks in order (or fails them)."""

    def __init__(self, end: int = 0, error: BaseException | None = None, shift: int = 0) -> None:
        self.config = type(
            "Config",
            (),
            {"broker_id": 0, "path": "/conf/server.ini", "zookeeper": ZkConfig("127.0.0.1:1")},
        )()
        self.log = FakeLog(end)
        self.log.stage = self._stage
        self.store = self
        self.error = error
        self.shift = shift
        self.flushed = 0
        self.refuse: BaseException | None = None
        self.defer_acks = False  # write at commit, acknowledge later (an fsync pending)

    def partition_for_put(self, topic: str, partition: int) -> FakeLog:
        if self.refuse is not None:
            raise self.refuse
        return self.log

    def _stage(self, record: bytes, ack, count: int = 1) -> None:
        self.log.staged.append((record, ack))
        self.log.counts.append(count)

    def commit_staged(self) -> None:
        self.log.written_end = self.log.next_offset + sum(len(r) for r, _a in self.log.staged)
        if self.defer_acks:
            return
        self.ack_staged()

    def ack_staged(self) -> None:
        offset = self.log.next_offset + self.shift
        for record, ack in self.log.staged:
            if self.error is not None:
                ack(None, self.error)
            else:
                ack(offset, None)
            offset += len(record)

    def flush_output(self) -> None:
        self.flushed += 1


def append(broker: FakeBroker, base: int = 0, entries: list[int] = SIZES, counts=None):
    replicator = Replicator(broker, SlaveConfig(0, "g"), reactor=None)
    return replicator._append("t", 1, base, b"".join(RECORDS), entries, counts)


def test_each_entry_is_staged_alone_with_its_exact_bytes():
    """One stage per entry: the store then rolls segments at the same record as the master.
    The Deferred fires with the local layout (last segment start, roll size)."""
    broker = FakeBroker(end=40)
    results = []
    append(broker, base=40).addCallback(results.append)
    assert [record for record, _ack in broker.log.staged] == RECORDS
    assert results == [(0, 1 << 20)]
    assert broker.flushed == 1


def test_an_entry_of_several_records_is_staged_as_one_write():
    broker = FakeBroker(end=0)
    results = []
    append(broker, entries=[SIZES[0], SIZES[1] + SIZES[2]], counts=[1, 2]).addCallback(
        results.append
    )
    assert [record for record, _ack in broker.log.staged] == [RECORDS[0], RECORDS[1] + RECORDS[2]]
    assert broker.log.counts == [1, 2]  # message counts stay per message, as on the master
    assert results == [(0, 1 << 20)]


def test_the_fetch_goes_on_once_written_and_a_later_failed_ack_stops_the_partition(caplog):
    """The fetch thread does not wait for the fsync; a failed acknowledgement still stops
    the partition (logged once, shown by ``stats slave``)."""
    broker = FakeBroker(end=0)
    broker.defer_acks = True
    replicator = Replicator(broker, SlaveConfig(0, "g"), reactor=None)
    results = []
    replicator._append("t", 1, 0, b"".join(RECORDS), SIZES).addCallback(results.append)
    assert results == [(0, 1 << 20)]  # fired before any acknowledgement
    broker.error = PartitionFailedError("fsync failed")
    broker.ack_staged()
    assert "fsync failed" in replicator.halted[("t", "0-1")]
    replicator._halt(("t", "0-1"), "again")
    assert caplog.text.count("replication of t partition 0-1 stopped") == 1


def test_a_local_end_other_than_the_fetched_offset_refuses_the_append():
    with pytest.raises(ReplicationHalted, match="local end 7 differs from the master's offset 0"):
        append(FakeBroker(end=7), base=0)


def test_a_topic_the_slave_does_not_accept_names_its_config_file():
    broker = FakeBroker()
    broker.refuse = InvalidTopicError("The server do not accept topic t")
    with pytest.raises(ReplicationHalted, match="/conf/server.ini"):
        append(broker)


def test_a_store_failure_fails_the_batch():
    failures = []
    append(FakeBroker(error=PartitionFailedError("fsync failed"))).addErrback(failures.append)
    assert failures[0].check(PartitionFailedError)


def test_a_record_stored_at_another_offset_fails_the_batch():
    failures = []
    append(FakeBroker(shift=1)).addErrback(failures.append)
    assert failures[0].check(ReplicationHalted)


def test_java_plugin_form_names_the_slave_file():
    assert parse_arguments(["-f", "s.ini", "-Fmetaslave=a.properties"]).slave == "a.properties"


def test_the_long_option_names_the_slave_file():
    assert parse_arguments(["-f", "s.ini", "--slave", "a.properties"]).slave == "a.properties"
    assert parse_arguments(["-f", "s.ini"]).slave is None


@pytest.mark.parametrize(
    "arguments", [["-Fother=x"], ["-Fmetaslave="], ["-Fmetaslave=a", "--slave", "b"]]
)
def test_other_plugins_and_conflicting_files_are_refused(arguments, capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["-f", "s.ini", *arguments])
    error = capsys.readouterr().err
    assert "metaslave" in error or "different files" in error
