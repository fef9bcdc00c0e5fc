"""The reactor half of the slave (``Replicator._append``) and the ``--slave`` arguments."""

from __future__ import annotations

import pytest

from meta.config import SlaveConfig
from meta.errors import InvalidTopicError, PartitionFailedError
from meta.protocol.message import pack_message
from meta.server.main import parse_arguments
from meta.slave.fetcher import ReplicationHalted
from meta.slave.replicator import Replicator

RECORDS = [pack_message(1, 0, b"one"), pack_message(2, 1, b"\0\0\0\0two"), pack_message(3, 4, b"")]
SIZES = [len(record) for record in RECORDS]


class FakeLog:
    def __init__(self, end: int) -> None:
        self.next_offset = end
        self.accepts_appends = True
        self.staged: list[tuple[bytes, object]] = []


class FakeBroker:
    """Stages like a partition log; ``commit_staged`` acks in order (or fails them)."""

    def __init__(self, end: int = 0, error: BaseException | None = None, shift: int = 0) -> None:
        self.config = type("Config", (), {"broker_id": 0, "path": "/conf/server.ini"})()
        self.log = FakeLog(end)
        self.log.stage = self._stage
        self.store = self
        self.error = error
        self.shift = shift
        self.flushed = 0
        self.refuse: BaseException | None = None

    def partition_for_put(self, topic: str, partition: int) -> FakeLog:
        if self.refuse is not None:
            raise self.refuse
        return self.log

    def _stage(self, record: bytes, ack) -> None:
        self.log.staged.append((record, ack))

    def commit_staged(self) -> None:
        offset = self.log.next_offset + self.shift
        for record, ack in self.log.staged:
            if self.error is not None:
                ack(None, self.error)
            else:
                ack(offset, None)
            offset += len(record)

    def flush_output(self) -> None:
        self.flushed += 1


def append(broker: FakeBroker, base: int = 0):
    replicator = Replicator(broker, SlaveConfig(0, "g"), reactor=None)
    return replicator._append("t", 1, base, b"".join(RECORDS), SIZES)


def test_each_record_is_staged_alone_with_its_exact_bytes():
    """One stage per record: the store then rolls segments at the same record as the master."""
    broker = FakeBroker(end=40)
    results = []
    append(broker, base=40).addCallback(results.append)
    assert [record for record, _ack in broker.log.staged] == RECORDS
    assert results == [sum(SIZES)]
    assert broker.flushed == 1


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
